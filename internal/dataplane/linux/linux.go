//go:build linux

// Package linux is the dataplane on a real kernel: IPVS, ipset members,
// nftables' generation and conntrack over the package's own netlink socket
// and codec (socket.go, encode.go, genl_ipvs.go), the VIP link and its
// addresses through github.com/vishvananda/netlink, iptables through
// iptables-save and iptables-restore.
//
// Every call is serialized and runs in its caller's goroutine, bounded by
// its context: the sockets end every wait at the deadline or at the
// context's cancellation, so no call can hang the agent or leave anything
// running behind it.
package linux

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// Options configure New. The zero value is usable.
type Options struct {
	// Logger receives warnings (a foreign link type, a sysctl that could not
	// be set); nil logs nothing.
	Logger *zap.Logger
	// LinkName is the dummy link holding the VIPs; default dataplane.LinkName.
	LinkName string
	// CallTimeout bounds a call whose context has no deadline, so that no
	// kernel request can hang the agent; default one minute.
	CallTimeout time.Duration
	// ProcSys is where sysctls are written; default /proc/sys.
	ProcSys string
	// SysModule is where kernel module parameters are; default /sys/module.
	SysModule string
	// StrictARP sets arp_ignore=1 and arp_announce=2 on all interfaces, so
	// that the VIPs on kube-ipvs0 are not answered for by every node (what
	// MetalLB in layer-2 mode needs; kube-proxy's --ipvs-strict-arp).
	StrictARP bool
	// LocalRoutes binds each VIP as a local route through the link, in the
	// local table, instead of as an address on it (kube-proxy's way): the
	// kernel walks a link's whole address list on every address added, so
	// binding N addresses costs the square of N, while a route costs the
	// same at any N. Either way the VIPs read back are those bound either
	// way, so switching leaves nothing behind.
	LocalRoutes bool
	// IptablesBackend forces nft or legacy; "" detects the node's.
	IptablesBackend shim.Backend
	// Conntrack is the nf_conntrack tuning Init writes, as kube-proxy does
	// at start; zero writes nothing.
	Conntrack dataplane.ConntrackTuning
}

// Dataplane talks to the kernel. Its methods may be called from several
// goroutines: they are serialized. Each part of dataplane.Dataplane has its
// file: ipvs.go, link.go, conntrack.go, and shim.go, whose Shim is embedded
// with its own lock.
type Dataplane struct {
	*Shim

	log       *zap.Logger
	linkName  string
	timeout   time.Duration
	procSys   string
	sysModule string
	strict    bool
	// localRoutes: VIPs are bound as local routes (Options.LocalRoutes).
	localRoutes bool
	tuning      dataplane.ConntrackTuning
	// ipvsFamily is the IPVS generic netlink family's id.
	ipvsFamily uint16
	// lastReals is how many real servers the last full read found (it
	// sizes the next one's map of counters).
	lastReals int

	// calls serializes and bounds the IPVS, rtnetlink and conntrack calls.
	calls *calls[*handles]

	// addrsFollowed and routesFollowed count Watch's open subscriptions
	// to address and to route announcements (FollowsAddrs).
	addrsFollowed, routesFollowed atomic.Int32
}

var _ dataplane.Dataplane = (*Dataplane)(nil)

// handles are the kernel sockets the dataplane's calls use.
type handles struct {
	// genl carries every IPVS request: batches, dumps, single requests.
	genl *socket
	// genlWide carries the dump of every IPVS service, and the reads of
	// a draining service's counters: its datagrams are four times genl's
	// (see wideBufSize), which a whole read's dumps of each service's
	// destinations, two per service of ten, would pay for.
	genlWide *socket
	// rt carries batches of address and route changes.
	rt *socket
	// routes reads the VIPs bound as local routes: the kernel filters its
	// dumps (see dumpLocalRoutes).
	routes *socket
	// nl does the rest of rtnetlink (links, address lists).
	nl *netlink.Handle
	ct flowTable // dialled on first use, by dialCT
	// dialCT opens the conntrack sockets (a seam for tests).
	dialCT func() (flowTable, error)
}

// bound gives the library's rtnetlink socket the call's deadline (the
// package's own sockets take it from the call's context).
func (h *handles) bound(deadline time.Time) error {
	if h.nl == nil {
		return nil
	}
	left := time.Until(deadline)
	if left < time.Millisecond {
		left = time.Millisecond
	}
	if err := h.nl.SetSocketTimeout(left); err != nil {
		return fmt.Errorf("set rtnetlink socket timeout: %w", err)
	}
	return nil
}

func (h *handles) close() {
	h.genl.close()
	h.genlWide.close()
	h.routes.close()
	h.rt.close()
	if h.nl != nil {
		h.nl.Close()
	}
	if h.ct != nil {
		_ = h.ct.Close()
	}
}

// New checks that the kernel has IPVS and opens the netlink sockets.
// It returns an error wrapping dataplane.ErrUnsupported when IPVS is missing.
func New(opts Options) (*Dataplane, error) {
	d := &Dataplane{
		log:         opts.Logger,
		linkName:    opts.LinkName,
		timeout:     opts.CallTimeout,
		procSys:     opts.ProcSys,
		sysModule:   opts.SysModule,
		strict:      opts.StrictARP,
		localRoutes: opts.LocalRoutes,
		tuning:      opts.Conntrack,
	}
	if d.log == nil {
		d.log = zap.NewNop()
	}
	d.log = d.log.Named("dataplane")
	if d.linkName == "" {
		d.linkName = dataplane.LinkName
	}
	if d.timeout <= 0 {
		d.timeout = time.Minute
	}
	if d.procSys == "" {
		d.procSys = "/proc/sys"
	}
	if d.sysModule == "" {
		d.sysModule = "/sys/module"
	}
	d.Shim = NewShim(ShimOptions{Logger: d.log, Backend: opts.IptablesBackend, CallTimeout: d.timeout})
	d.calls = newCalls(d.log, d.timeout, openHandles)
	// Opens the sockets too, so that a node that cannot fails at start.
	err := d.do(context.Background(), "look up IPVS", func(ctx context.Context, h *handles) error {
		fam, err := ipvsFamilyID(ctx, h.genl)
		d.ipvsFamily = fam
		return err
	})
	if ipvsAbsent(err) {
		return nil, fmt.Errorf("IPVS is not available in this kernel: load ip_vs (modprobe ip_vs) or use a kernel built with CONFIG_IP_VS (%v): %w",
			err, dataplane.ErrUnsupported)
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

// ipvsAbsent tells whether looking IPVS up failed because this kernel has
// none: no IPVS family, or no generic netlink at all (a kernel without it,
// or an emulator such as qemu-user that passes only routing netlink,
// refuses the socket itself).
func ipvsAbsent(err error) bool {
	return errors.Is(err, dataplane.ErrUnsupported) || errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT)
}

func openHandles() (*handles, error) {
	genl, err := openSocket(unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("open generic netlink socket: %w", err)
	}
	nh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		genl.close()
		return nil, fmt.Errorf("open rtnetlink socket: %w", err)
	}
	return &handles{genl: genl, genlWide: newWideSocket(unix.NETLINK_GENERIC), rt: newSocket(unix.NETLINK_ROUTE),
		routes: newStrictSocket(unix.NETLINK_ROUTE), nl: nh, dialCT: dialConntrack}, nil
}

// do runs one kernel call on the dataplane's sockets (see calls).
func (d *Dataplane) do(ctx context.Context, what string, fn func(ctx context.Context, h *handles) error) error {
	return d.calls.run(ctx, what, fn)
}

// Observe dumps every service with its destinations, the link's addresses
// and the shim's set members. Any failure fails the whole read: a partial
// dump must never look like a table that lost services.
func (d *Dataplane) Observe(ctx context.Context) (dataplane.Observation, error) {
	ctx, cancel := d.readContext(ctx)
	defer cancel()
	var took [3]time.Duration // IPVS, the link's addresses, the sets
	began := time.Now()
	obs, err := call(ctx, d.calls, "observe", func(ctx context.Context, h *handles) (dataplane.Observation, error) {
		obs := dataplane.Observation{State: model.NewState(), Conns: map[dataplane.RealRef]model.Conns{}}
		if err := d.dumpIPVS(ctx, h, &obs); err != nil {
			return dataplane.Observation{}, err
		}
		took[0] = time.Since(began)
		addrs, err := d.listAddrs(ctx, h)
		if err != nil {
			return dataplane.Observation{}, err
		}
		for _, a := range addrs {
			obs.State.Addrs[a] = struct{}{}
		}
		took[1] = time.Since(began) - took[0]
		return obs, nil
	})
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe the kernel: %w", err)
	}
	setsBegan := time.Now()
	sets, err := d.SetEntries(ctx)
	if err != nil {
		return dataplane.Observation{}, fmt.Errorf("observe the kernel: %w", err)
	}
	obs.State.Sets = sets
	took[2] = time.Since(setsBegan)
	// What a whole read costs by part: the bound within which the rescan
	// repairs drift grows with it.
	d.log.Log(logv.V(logv.Sync), "observed", zap.Int("services", len(obs.State.Services)), zap.Duration("ipvs", took[0]),
		zap.Int("addrs", len(obs.State.Addrs)), zap.Duration("addrs_took", took[1]),
		zap.Int("set_members", len(sets)), zap.Duration("sets", took[2]))
	return obs, nil
}

// Scan reads what Observe reads, but the counters, handing each entry to v
// as it is decoded: the same requests, no maps built.
func (d *Dataplane) Scan(ctx context.Context, v dataplane.Visitor) error {
	ctx, cancel := d.readContext(ctx)
	defer cancel()
	_, err := call(ctx, d.calls, "scan", func(ctx context.Context, h *handles) (struct{}, error) {
		return struct{}{}, d.scanTableAndAddrs(ctx, h, v)
	})
	if err == nil && v.Member != nil {
		err = d.EachSetEntry(ctx, v.Member)
	}
	if err != nil {
		return fmt.Errorf("scan the kernel: %w", err)
	}
	return nil
}

// scanTableAndAddrs is the part of Scan read through the dataplane's
// handles: the IPVS table and the link's addresses (the sets are read on
// the shim's own socket).
func (d *Dataplane) scanTableAndAddrs(ctx context.Context, h *handles, v dataplane.Visitor) error {
	err := d.walkIPVS(ctx, h, func(int) {}, func(vs model.VirtualServer, reals []realRead) {
		if v.Service != nil {
			v.Service(vs)
		}
		if v.Real != nil {
			for _, r := range reals {
				v.Real(vs.Key, r.rs)
			}
		}
	})
	if err != nil || v.Addr == nil {
		return err
	}
	addrs, err := d.listAddrs(ctx, h)
	for _, a := range addrs {
		v.Addr(a)
	}
	return err
}

// readBound is how many of a call's bound (CallTimeout) a whole read of
// the kernel may take: its time grows with the table, and a table of
// 50,000 Services reads in tens of seconds under emulation, more on a
// loaded machine. Bounded by a single call's minute, such a read was cut
// short now and then and dropped, and the repair it carried waited for
// the next. The bound still ends a read the kernel stopped answering.
const readBound = 10

// readContext bounds a whole read (Observe, Scan) whose context has no
// deadline by readBound calls' time.
func (d *Dataplane) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, readBound*d.timeout)
}

// Close releases the sockets; later calls fail.
func (d *Dataplane) Close() error {
	d.calls.close()
	d.Shim.close()
	return nil
}
