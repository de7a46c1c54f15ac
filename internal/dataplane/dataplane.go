// Package dataplane is the kernel boundary: the one interface through which
// the agent reads and changes the IPVS table, the VIPs on its link, IPVS
// timeouts and sysctls, the netfilter shim and conntrack. Dataplane is
// composed of one small interface per part (IPVS, Link, Netfilter,
// Conntrack); linux/ implements it on the real kernel and fake/ in memory,
// each with one file per part, and dataplanetest/ is the contract suite both
// must pass, laid out the same way.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// LinkName is the dummy interface that holds every VIP so that IPVS sees
// traffic addressed to it as local (the same name kube-proxy's IPVS mode uses,
// so a node can migrate either way).
const LinkName = "kube-ipvs0"

// Errors a dataplane returns, wrapped, so callers can tell them apart with
// errors.Is. They mirror the kernel's EEXIST / ENOENT / ESRCH.
var (
	ErrExist    = errors.New("already exists")
	ErrNotExist = errors.New("does not exist")
	// ErrUnsupported: the kernel lacks IPVS or a scheduler module.
	ErrUnsupported = errors.New("not supported by this kernel")
	// ErrNotTried: Apply did not send the change, because its context
	// ended first (the error wraps the context's too).
	ErrNotTried = errors.New("not tried")
	// ErrFull: a set already holds as many members as its maxelem allows
	// and refuses another (the kernel's IPSET_ERR_HASH_FULL). A member that
	// is there already is ErrExist, full or not.
	ErrFull = errors.New("hash is full, cannot add more elements (IPSET_ERR_HASH_FULL)")
	// ErrSetEmptied: EnsureShim replaced a set of another type or family
	// under one of the shim's names with an empty one of the shim's (the
	// kernel can neither swap nor convert it). The set's members are gone:
	// a caller's cache of them is stale until it reads them again.
	ErrSetEmptied = errors.New("set made anew, empty: its members are gone")
)

// RestoreError is a failed iptables-restore of the netfilter shim's rules
// of one family, as EnsureShim returns it (wrapped), so that kube-proxy's
// per-family restore failure counter can be kept.
type RestoreError struct {
	IPv6 bool
	Err  error
}

func (e *RestoreError) Error() string { return e.Err.Error() }
func (e *RestoreError) Unwrap() error { return e.Err }

// Observation is one full read of the kernel: the IPVS table (every service,
// ours or not), the addresses bound on LinkName, the members of the shim's
// ipsets (State.Sets), and every real server's connection counters.
type Observation struct {
	State model.State
	Conns map[RealRef]model.Conns
}

// Visitor is handed, entry by entry, what a Scan reads: every virtual
// server, each of its real servers (after the virtual server), every
// address on LinkName and every member of the shim's sets. A nil function
// skips its kind. What it is handed is valid only during the call (it may
// be kept: none of it aliases the read's buffers).
type Visitor struct {
	Service func(vs model.VirtualServer)
	Real    func(vs model.VSKey, rs model.RealServer)
	Addr    func(a netip.Addr)
	Member  func(e model.SetEntry)
}

// RealRef names one real server of one virtual server.
type RealRef struct {
	VS model.VSKey
	RS netip.AddrPort
}

// Timeouts are IPVS' connection timeouts; zero leaves a value as it is.
type Timeouts struct {
	TCP, TCPFin, UDP time.Duration
}

// Dataplane is everything the agent does to the kernel: the four parts
// below, the operations (model.Op) that change the table, the link's
// addresses and the shim's set members (Batch), one full read of them all,
// and Close. Implementations are not safe for concurrent use; the
// reconciler serializes calls. Every method honours ctx's deadline so an
// unanswered netlink request cannot hang a sync.
type Dataplane interface {
	IPVS
	Link
	Netfilter
	Conntrack
	Batch

	// Observe dumps the whole table, the link's addresses and the shim's set
	// members. An error means the read is doubtful and must not be used to
	// prune anything.
	Observe(ctx context.Context) (Observation, error)
	// Scan reads what Observe reads (but the connection counters) and hands
	// it to v as it is decoded, keeping none of it: a read whose reader
	// wants only a digest of the kernel costs no copy of it (a whole
	// Observation of a large cluster is a second copy of its table). An
	// error means the read is doubtful, as Observe's.
	Scan(ctx context.Context, v Visitor) error
	// Probe makes a cheap request every kernel the agent can program
	// answers (it reads IPVS' configuration and looks up LinkName). It is
	// the canary that tells a kernel refusing the agent as a whole (IPVS
	// gone, CAP_NET_ADMIN lost, the link deleted) from a kernel refusing
	// one object (a scheduler it lacks, an address of a family switched
	// off): after failed operations, only a failed Probe fails the sync.
	Probe(ctx context.Context) error
	Close() error
}

// IPVS is what the kernel's IPVS table holds beside the virtual and real
// servers that operations make: connection counters and timeouts.
type IPVS interface {
	// Conns reads the connection counters of one virtual server's reals.
	Conns(ctx context.Context, vs model.VSKey) (map[netip.AddrPort]model.Conns, error)

	// SetTimeouts sets IPVS' tcp, tcpfin and udp timeouts (zero: unchanged).
	SetTimeouts(ctx context.Context, t Timeouts) error
}

// Link is LinkName, the dummy link whose addresses (bound and unbound by
// operations) make the VIPs local, and the node settings IPVS needs.
type Link interface {
	// Init creates LinkName if missing, brings it up and sets the sysctls
	// IPVS needs. It is idempotent.
	Init(ctx context.Context) error
	// LinkFamilies tells which address families the link can hold
	// addresses of now: IPv4 always; IPv6 not when the kernel has none
	// (booted with ipv6.disable=1) or IPv6 is disabled on the link
	// (net.ipv6.conf.<link>.disable_ipv6, which conf.all sets on every
	// link and conf.default on a link made after it). There the kernel
	// refuses an IPv6 address with EACCES. Before Init it answers for a
	// link that Init would make.
	LinkFamilies(ctx context.Context) (model.Families, error)
	// DeleteLink removes LinkName and with it every bound address.
	DeleteLink(ctx context.Context) error
}

// Netfilter is the shim (package shim): its ipsets and iptables rules, and
// the removal of kube-proxy's. It needs no IPVS, so it can be had alone;
// alone, its Apply makes the operations on set members and refuses the
// rest.
type Netfilter interface {
	Batch
	// EnsureShim creates the shim's ipsets that are missing and, per family,
	// rewrites the shim's iptables chains and jumps with one atomic
	// iptables-restore only when what is there differs from cfg's rules.
	// Idempotent; a second call with the same cfg changes nothing.
	EnsureShim(ctx context.Context, cfg shim.Config) error
	// ShimInPlace tells, changing nothing, whether EnsureShim(cfg) would
	// find every family's rules as cfg has them (and so the sets they
	// match, which the kernel keeps while a rule names them): how the drift
	// check finds rules someone else flushed without writing any.
	ShimInPlace(ctx context.Context, cfg shim.Config) (bool, error)
	// SetEntries lists the members of every shim set there is: the part of
	// Observe that is the shim's.
	SetEntries(ctx context.Context) (map[model.SetEntry]struct{}, error)
	// DeleteShim removes the shim's jumps, chains and sets, and nothing else.
	DeleteShim(ctx context.Context) error
	// DeleteKubeProxyShim removes what kube-proxy's IPVS mode leaves behind
	// in netfilter: the jumps to its KUBE-* chains, those chains, and its
	// ipsets. (Its virtual servers and kube-ipvs0 are the same as ours.)
	DeleteKubeProxyShim(ctx context.Context) error
}

// Conntrack deletes the connection-tracking entries that would keep UDP
// flows pinned to what is gone.
type Conntrack interface {
	// ClearConntrack deletes the conntrack entries s names and returns how
	// many it deleted. It reads each address family's table at most once,
	// however many keys s holds: the cost of a cleanup is the size of the
	// table, once, not once per removed real server.
	ClearConntrack(ctx context.Context, s StaleFlows) (int, error)
}

// Batch is how every write reaches the kernel: many operations at once,
// because a cold start makes hundreds of thousands and a kernel round trip
// each would be most of it. Apply makes ops in order and returns one error
// per operation: nil when made, else the kernel's answer to that one
// (ErrExist, ErrNotExist, ErrFull, ErrUnsupported, ...), wrapped with what
// was being done. A failure does not stop the operations after it. Once
// ctx ends, the operations not yet sent fail with ErrNotTried and ctx's
// error; an operation whose outcome could not be learnt fails with another
// error (it may have been made: only a fresh Observe tells).
type Batch interface {
	Apply(ctx context.Context, ops []model.Op) []error
}

// NotTried is the error of an operation Apply did not send because ctx ended.
func NotTried(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrNotTried, context.Cause(ctx))
}

// Reader is what the drift check reads the kernel through, on sockets of
// its own beside the syncs, so that a change never waits for a read of the
// whole kernel. Every Dataplane is one.
type Reader interface {
	// Observe is Dataplane.Observe: the whole table at once, read the same
	// way the first sync reads it.
	Observe(ctx context.Context) (Observation, error)
	// Scan is Dataplane.Scan.
	Scan(ctx context.Context, v Visitor) error
	// ShimInPlace is Netfilter.ShimInPlace.
	ShimInPlace(ctx context.Context, cfg shim.Config) (bool, error)
}
