package reconciler

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// TestTranslateAllIsInOrder: translating many Services on several CPUs
// gives each name its own Service's translation, in the order of names,
// the same as translating them one by one; names without a Service get
// the empty translation. The Services of two slices and at least memoFrom
// endpoints read through their memos, one per Service, with the same
// result; those of two small slices (a dual-stack Service's) have none.
func TestTranslateAllIsInOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	r := newRig(t)
	var names []model.ServiceName
	for i := range 4 * parallelFrom {
		name := fmt.Sprintf("s%d", i)
		r.store.SetService(service(name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), corev1.ProtocolTCP, 80))
		r.store.SetSlice(slice(name, corev1.ProtocolTCP, 8080, ready(fmt.Sprintf("10.244.%d.%d", i/250, i%250+1))))
		var second []endpoint
		switch i % 3 {
		case 0: // large: memoFrom more
			for k := range memoFrom {
				second = append(second, ready(fmt.Sprintf("10.%d.%d.%d", 100+k/200, i%250, k%200+1)))
			}
		case 1: // small
			second = append(second, ready(fmt.Sprintf("10.245.%d.%d", i/250, i%250+1)))
		}
		if len(second) > 0 {
			s := slice(name, corev1.ProtocolTCP, 8080, second...)
			s.Name += "-2"
			r.store.SetSlice(s)
		}
		names = append(names, model.ServiceName{Namespace: "default", Name: name})
	}
	names = append(names, model.ServiceName{Namespace: "default", Name: "gone"})
	node, cfg := r.rec.opt.Store.Node(), r.rec.translateConfig()
	memos := endpointMemos{}
	got := translateAll(r.store, names, node, cfg, memos)
	if len(memos) != parallelFrom*4/3+1 {
		t.Fatalf("%d memos for %d large Services of two slices", len(memos), parallelFrom*4/3+1)
	}
	if len(got) != len(names) {
		t.Fatalf("%d translations for %d names", len(got), len(names))
	}
	for i, name := range names {
		svc, eps := r.store.Service(name)
		want := translate.Service(svc, eps, node, cfg)
		if got[i].svc != svc || !reflect.DeepEqual(got[i].res, want) {
			t.Fatalf("translation %d is not %s's", i, name)
		}
	}
	if last := got[len(got)-1]; last.svc != nil || len(last.res.Services) != 0 {
		t.Fatalf("a name without a Service translated to %+v", last)
	}
}
