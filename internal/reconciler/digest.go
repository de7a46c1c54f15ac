package reconciler

import (
	"hash/maphash"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// digest is an order-free digest of a collection: how many entries, and
// the sum of their hashes. The sync loop keeps one of its cached table and
// one of its cached set members, updated with every change it records;
// the drift checker takes the same of its read, off the loop. When two
// agree, what they digest agrees (but for a 64-bit collision) and the fold
// skips comparing it entry by entry: at 10,000 Services × 10 endpoints that
// comparison was nearly all of an idle fold, which a change waits for (issue 12).
type digest struct {
	n   int
	sum uint64
}

// count adds an entry's hash (sign +1) or takes it out (sign -1).
func (d *digest) count(h uint64, sign int) {
	d.n += sign
	d.sum += uint64(sign) * h
}

// remove takes out a part counted into d.
func (d *digest) remove(part digest) {
	d.n -= part.n
	d.sum -= part.sum
}

// hashSeed is the process's one seed: both sides hash with it.
var hashSeed = maphash.MakeSeed()

func memberHash(e model.SetEntry) uint64 { return maphash.Comparable(hashSeed, e) }

// vsPart and realPart are what a table digest hashes: exactly the fields
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
	return maphash.Comparable(hashSeed, vsPart{Key: v.Key, Scheduler: v.Scheduler, Flags: v.Flags & model.ConfigFlags, Timeout: v.Timeout})
}

func realHash(k model.VSKey, rs model.RealServer) uint64 {
	return maphash.Comparable(hashSeed, realPart{Key: k, RS: rs})
}

// countService counts a virtual server and its real servers.
func (d *digest) countService(svc *model.Service, sign int) {
	d.count(vsHash(svc.VirtualServer), sign)
	for _, rs := range svc.Reals.All() {
		d.count(realHash(svc.Key, rs), sign)
	}
}

// membersDigest digests a whole set of members.
func membersDigest(members map[model.SetEntry]struct{}) digest {
	var d digest
	for e := range members {
		d.count(memberHash(e), 1)
	}
	return d
}

// tableDigest digests a whole table.
func tableDigest(services map[model.VSKey]*model.Service) digest {
	var d digest
	for _, svc := range services {
		d.countService(svc, 1)
	}
	return d
}
