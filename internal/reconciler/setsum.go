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

// tableSum is the same kind of digest of an IPVS table: each virtual
// server (its configuration as Equal compares it) and each real server
// counts once. The fold compares the virtual servers one by one only when
// the read's and the cache's differ.
type tableSum struct{ setSum }

// vsPart and realPart are what is hashed: exactly the fields
// model.Service.Equal compares, the flags masked as it masks them.
type vsPart struct {
	Key       model.VSKey
	Scheduler model.Scheduler
	Flags     model.Flags
	Timeout   uint32
}

type realPart struct {
	Key model.VSKey
	RS  model.RealServer
}

func vsHash(v model.VirtualServer) uint64 {
	return maphash.Comparable(setSeed, vsPart{Key: v.Key, Scheduler: v.Scheduler, Flags: v.Flags & model.ConfigFlags, Timeout: v.Timeout})
}

func realHash(k model.VSKey, rs model.RealServer) uint64 {
	return maphash.Comparable(setSeed, realPart{Key: k, RS: rs})
}

// service counts a virtual server and its real servers (sign +1), or
// takes them out (sign -1).
func (t *tableSum) service(svc *model.Service, sign int) {
	t.vs(svc.VirtualServer, sign)
	for _, rs := range svc.Reals {
		t.real(svc.Key, rs, sign)
	}
}

func (t *tableSum) vs(v model.VirtualServer, sign int) {
	t.n += sign
	t.sum += uint64(sign) * vsHash(v)
}

func (t *tableSum) real(k model.VSKey, rs model.RealServer, sign int) {
	t.n += sign
	t.sum += uint64(sign) * realHash(k, rs)
}

// tableSumOf digests a whole table.
func tableSumOf(services map[model.VSKey]*model.Service) tableSum {
	var t tableSum
	for _, svc := range services {
		t.service(svc, 1)
	}
	return t
}
