package observed

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// randomVSOp is an operation on virtual server web of any kind, its real
// servers drawn from a few addresses so that adds, updates and deletes
// meet ones present and absent alike.
func randomVSOp(r *rand.Rand) model.Op {
	rs := model.RealServer{
		Addr:   netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 244, 0, byte(r.IntN(8))}), 8080),
		Weight: r.IntN(3),
	}
	vs := model.VirtualServer{Key: web, Scheduler: []model.Scheduler{"rr", "lc"}[r.IntN(2)]}
	kinds := []model.OpKind{model.AddReal, model.UpdateReal, model.DeleteReal, model.AddReal, model.DeleteReal,
		model.AddService, model.UpdateService, model.DeleteService}
	// The virtual server's own operations are drawn less often, so that
	// runs of real servers' operations build up between them.
	k := kinds[r.IntN(len(kinds))]
	if k == model.AddService || k == model.UpdateService || k == model.DeleteService {
		k = kinds[r.IntN(len(kinds))]
	}
	return model.Op{Kind: k, VS: vs, RS: rs}
}

// TestReplayDigestFollowsTheValue: the digest a replay keeps in step
// operation by operation is, after every operation of every kind, the
// digest of the value replayed, counted afresh.
func TestReplayDigestFollowsTheValue(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		var base *model.Service
		if r.IntN(4) > 0 {
			base = &model.Service{VirtualServer: model.VirtualServer{Key: web, Scheduler: "rr"}}
			for range r.IntN(6) {
				base.Reals.Set(randomVSOp(r).RS)
			}
		}
		var before *model.Service
		if base != nil {
			before = base.Clone()
		}
		rp := newReplay(web, base)
		var trail []string
		for range 40 {
			op := randomVSOp(r)
			trail = append(trail, fmt.Sprintf("%v %v", op.Kind, op.RS))
			rp.apply(op)
			svc, ok := rp.st.Services[web]
			want := Digest{}
			if ok {
				want = serviceDigest(svc)
			}
			if rp.digest != want {
				t.Fatalf("seed %d: after %v the replay's digest is %+v, the value's %+v", seed, trail, rp.digest, want)
			}
			if !rp.is(want, ok) || rp.is(want, !ok) {
				t.Fatalf("seed %d: after %v the replay does not answer for its own value", seed, trail)
			}
		}
		if base != nil && (base.VirtualServer != before.VirtualServer || !base.Reals.Equal(before.Reals)) {
			t.Fatalf("seed %d: the replay changed the log's base", seed)
		}
	}
}
