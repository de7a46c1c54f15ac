package observed

import (
	"hash/maphash"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Digest is an order-free digest of a collection: how many entries, and
// the sum of their hashes. The cache keeps one of its IPVS table and one of
// its set members, updated with every write; a rescan takes the same of
// its read, off the sync loop. When two agree, what they digest agrees
// (but for a 64-bit collision) and a fold skips comparing it entry by
// entry, which at 10,000 Services × 10 endpoints would be nearly all of an
// idle fold.
type Digest struct {
	n   int
	sum uint64
}

// count adds an entry's hash (sign +1) or takes it out (sign -1).
func (d *Digest) count(h uint64, sign int) {
	d.n += sign
	d.sum += uint64(sign) * h
}

// remove takes out a part counted into d.
func (d *Digest) remove(part Digest) {
	d.n -= part.n
	d.sum -= part.sum
}

// hashSeed is the process's one seed: the cache and every read hash with it.
var hashSeed = maphash.MakeSeed()

// MemberHash is a set member's hash.
func MemberHash(e model.SetEntry) uint64 { return maphash.Comparable(hashSeed, e) }

// VSHash is a virtual server's hash: of its canonical form, the one
// model.VirtualServer.Equal compares, so that two equal virtual servers
// hash alike.
func VSHash(v model.VirtualServer) uint64 { return maphash.Comparable(hashSeed, v.Canonical()) }

type realPart struct {
	Key model.VSKey
	RS  model.RealServer
}

// RealHash is the hash of real server rs of virtual server k.
func RealHash(k model.VSKey, rs model.RealServer) uint64 {
	return maphash.Comparable(hashSeed, realPart{Key: k, RS: rs})
}

// countService counts a virtual server and its real servers.
func (d *Digest) countService(svc *model.Service, sign int) {
	d.count(VSHash(svc.VirtualServer), sign)
	for _, rs := range svc.Reals.All() {
		d.count(RealHash(svc.Key, rs), sign)
	}
}

// serviceDigest is one virtual server's part of a table digest.
func serviceDigest(svc *model.Service) Digest {
	var d Digest
	d.countService(svc, 1)
	return d
}

// MembersDigest digests a whole set of members.
func MembersDigest(members map[model.SetEntry]struct{}) Digest {
	var d Digest
	for e := range members {
		d.count(MemberHash(e), 1)
	}
	return d
}

// TableDigest digests a whole table.
func TableDigest(services map[model.VSKey]*model.Service) Digest {
	var d Digest
	for _, svc := range services {
		d.countService(svc, 1)
	}
	return d
}
