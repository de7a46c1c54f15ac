package reconciler

import (
	"hash/maphash"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// setSum is an order-free digest of a set of set members: how many, and
// the sum of their hashes. The sync loop keeps one of its cache, updated
// with every member it adds or removes; the drift checker takes one of
// its read off the loop. When the two agree, the sets agree (but for a
// 64-bit collision) and the fold skips comparing the members one by one:
// at 10,000 Services × 10 endpoints that comparison of 110,000 members was
// most of an idle fold, which a change waits for (issue 12).
type setSum struct {
	n   int
	sum uint64
}

// setSeed is the process's one seed: both sides hash with it.
var setSeed = maphash.MakeSeed()

func (s *setSum) add(e model.SetEntry) {
	s.n++
	s.sum += maphash.Comparable(setSeed, e)
}

func (s *setSum) remove(e model.SetEntry) {
	s.n--
	s.sum -= maphash.Comparable(setSeed, e)
}

// sumOf digests a whole set of members.
func sumOf(members map[model.SetEntry]struct{}) setSum {
	var s setSum
	for e := range members {
		s.add(e)
	}
	return s
}
