package plan

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// TestLocalSourcesMarks checks the firewall-mark virtual servers of
// Local-policy frontends: the LOCAL-SOURCES member carrying the mark is
// their ownership record, written before the virtual server is made and
// removed after it is deleted; a firewall-mark service no member of ours
// names (keepalived's) is never deleted, updated or steered into.
func TestLocalSourcesMarks(t *testing.T) {
	lb := netip.MustParseAddr("192.0.2.10")
	const mark = 0x4cfc3383
	k := model.VSKey{FWMark: mark, Addr: netip.IPv4Unspecified()}
	k6 := model.VSKey{FWMark: mark, Addr: netip.IPv6Unspecified()}
	keepalived := model.VSKey{FWMark: 7, Addr: netip.IPv4Unspecified()}
	member := shim.LocalSourceEntry(lb, model.TCP, 80, mark)
	ours := func(extra ...*model.Service) model.State {
		s := state(nil, append([]*model.Service{svc(k, "rr", rs("10.244.2.7:8080", 1))}, extra...)...)
		s.Sets[member] = struct{}{}
		return s
	}

	t.Run("owned by its member only, in its family", func(t *testing.T) {
		o := testOwner(ours())
		for _, tt := range []struct {
			key  model.VSKey
			want bool
		}{{k, true}, {k6, false}, {keepalived, false}, {model.VSKey{FWMark: mark + 1, Addr: netip.IPv4Unspecified()}, false}} {
			if got := o.OwnsService(tt.key); got != tt.want {
				t.Errorf("OwnsService(%s %s) = %v, want %v", tt.key, tt.key.Addr, got, tt.want)
			}
		}
		if testOwner(state(nil, svc(k, "rr"))).OwnsService(k) {
			t.Error("a firewall-mark service without our member is ours")
		}
	})

	t.Run("the member brackets its virtual server", func(t *testing.T) {
		got := render(Diff(ours(), model.NewState(), testOwner(model.NewState())))
		want := "ipset add KUBE-IPVS-LOCAL-SOURCES 192.0.2.10,tcp:80 skbmark 0x4cfc3383\n" +
			"-A -f 1291596675 -s rr\n" +
			"-a -f 1291596675 -r 10.244.2.7:8080 -m -w 1\n"
		if got != want {
			t.Errorf("create:\n%s\nwant:\n%s", got, want)
		}
		obs := ours(svc(keepalived, "wlc", rs("10.0.0.5:80", 1)))
		got = render(Diff(model.NewState(), obs, testOwner(obs)))
		want = "-D -f 1291596675\n" +
			"ipset del KUBE-IPVS-LOCAL-SOURCES 192.0.2.10,tcp:80 skbmark 0x4cfc3383\n"
		if got != want {
			t.Errorf("delete (keepalived's -f 7 stays):\n%s\nwant:\n%s", got, want)
		}
	})

	t.Run("another tool's service on the mark: refused, nothing steered into it", func(t *testing.T) {
		observed := state(nil, svc(k, "wlc", rs("10.0.0.5:80", 1)))
		desired := ours()
		ops, refused := Plan(desired, observed, testOwner(observed))
		if got := render(ops); got != "" {
			t.Errorf("ops:\n%s\nwant none", got)
		}
		if len(refused) != 1 || refused[0].Key != k || refused[0].Why != Foreign {
			t.Errorf("refused %v, want %s as foreign", refused, k)
		}
		if s := render(ops); strings.Contains(s, "LOCAL-SOURCES") {
			t.Errorf("a member steers connections into another tool's service:\n%s", s)
		}
	})
}
