package reconciler

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The connection counters the sync loop caches for draining are kept only
// for real servers the kernel holds: a rolling Deployment replaces its
// endpoints all day on incremental syncs, and each replaced one must not
// leave an entry behind; nor must a deleted Service.
func TestConnCountersFollowRealServers(t *testing.T) {
	r := newRig(t)
	r.webAndDNS()
	r.sync(false)
	web := model.NewVSKey(model.TCP, netip.MustParseAddr("10.96.0.10"), 80)
	prev := []string{"10.244.1.2", "10.244.2.2"}
	for i := range 200 {
		// One of the two endpoints is replaced; every third replaced one
		// still has a connection, so it drains until its timeout.
		next := fmt.Sprintf("10.244.%d.%d", 3+i/250, 1+i%250)
		if i%3 == 0 {
			r.fake.SetConns(dataplane.RealRef{VS: web, RS: netip.MustParseAddrPort(prev[0] + ":8080")}, model.Conns{Active: 1})
		}
		prev = []string{prev[1], next}
		r.store.SetSlice(slice("web", corev1.ProtocolTCP, 8080, ready(prev[0]), ready(prev[1])))
		r.clock.advance(time.Minute)
		if st := r.sync(false); st.Full {
			t.Fatalf("sync %d was full", i)
		}
	}
	live := 0
	for _, svc := range r.rec.obs.State().Services {
		live += svc.Reals.Len()
	}
	for ref := range r.rec.obs.Conns() {
		if svc, ok := r.rec.obs.State().Services[ref.VS]; !ok || !svc.Reals.Has(ref.RS) {
			t.Errorf("counters cached for %s of %s, which the kernel does not hold", ref.RS, ref.VS)
		}
	}
	if n := len(r.rec.obs.Conns()); n > live {
		t.Fatalf("%d cached counters for %d real servers", n, live)
	}

	r.store.DeleteService(model.ServiceName{Namespace: "default", Name: "web"})
	r.store.DeleteSlice("default", "web-abc")
	r.clock.advance(time.Minute)
	r.sync(false)
	for ref := range r.rec.obs.Conns() {
		if ref.VS == web {
			t.Errorf("counters cached for %s of the deleted Service", ref.RS)
		}
	}
}
