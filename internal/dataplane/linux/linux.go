//go:build linux

// Package linux is the dataplane on a real kernel: IPVS through
// github.com/moby/ipvs, the VIP link and its addresses through
// github.com/vishvananda/netlink, conntrack through github.com/ti-mo/conntrack.
//
// Two facts about moby/ipvs shape this package (see docs on KERNEL-LAB):
// on a kernel without IPVS it reports success and later panics, so New checks
// for IPVS itself; and a Handle is not safe for concurrent use and an
// unanswered request never returns, so every call is serialized and bounded
// by its context, and a handle that timed out is thrown away.
package linux

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/ipvs"
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
	tuning    dataplane.ConntrackTuning
	// ipvsFamily is the IPVS generic netlink family's id, for batches.
	ipvsFamily uint16

	// calls serializes and bounds the IPVS, rtnetlink and conntrack calls.
	calls *calls[*handles]
}

var _ dataplane.Dataplane = (*Dataplane)(nil)

// handles are the kernel sockets one call uses. A call that times out may
// still be running in its goroutine, so it keeps its own handles and the
// Dataplane drops them rather than share them with the next call.
type handles struct {
	ipvs *ipvs.Handle
	nl   *netlink.Handle
	ct   flowTable // dialled on first use, by dialCT
	// dialCT opens the conntrack socket (a seam for tests).
	dialCT func() (flowTable, error)
	// genl and rt carry batches (Apply) to IPVS and rtnetlink; opened on
	// first use.
	genl, rt *batchSocket
}

// batchSocket returns *s, opening it first if needed.
func (h *handles) batchSocket(s **batchSocket, proto int, timeout time.Duration) (*batchSocket, error) {
	if *s == nil {
		bs, err := openBatchSocket(proto, timeout)
		if err != nil {
			return nil, err
		}
		*s = bs
	}
	return *s, nil
}

func (h *handles) close() {
	if h.ipvs != nil {
		h.ipvs.Close()
	}
	if h.nl != nil {
		h.nl.Close()
	}
	if h.ct != nil {
		_ = h.ct.Close()
	}
	h.genl.close()
	h.rt.close()
}

// New checks that the kernel has IPVS and opens the netlink sockets.
// It returns an error wrapping dataplane.ErrUnsupported when IPVS is missing.
func New(opts Options) (*Dataplane, error) {
	d := &Dataplane{
		log:       opts.Logger,
		linkName:  opts.LinkName,
		timeout:   opts.CallTimeout,
		procSys:   opts.ProcSys,
		sysModule: opts.SysModule,
		strict:    opts.StrictARP,
		tuning:    opts.Conntrack,
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
	fam, err := checkIPVS(d.timeout)
	if err != nil {
		return nil, err
	}
	d.ipvsFamily = fam
	// Open the sockets now, so that a node that cannot fails at start.
	if err := d.do(context.Background(), "open netlink sockets", func(*handles) error { return nil }); err != nil {
		return nil, err
	}
	return d, nil
}

// checkIPVS looks up the IPVS generic-netlink family. The lookup makes the
// kernel load ip_vs if it is a module, so a node where nobody ran modprobe
// still works; only a kernel built without IPVS fails. moby/ipvs cannot be
// trusted for this: without IPVS it reports success.
func checkIPVS(timeout time.Duration) (uint16, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	fam, err := bounded(ctx, func() (*netlink.GenlFamily, error) { return netlink.GenlFamilyGet("IPVS") })
	if err != nil {
		return 0, fmt.Errorf("IPVS is not available in this kernel: load ip_vs (modprobe ip_vs) or use a kernel built with CONFIG_IP_VS (generic netlink family IPVS: %v): %w",
			err, dataplane.ErrUnsupported)
	}
	return fam.ID, nil
}

func openHandles() (*handles, error) {
	ih, err := ipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("open IPVS netlink socket: %w", err)
	}
	nh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		ih.Close()
		return nil, fmt.Errorf("open rtnetlink socket: %w", err)
	}
	return &handles{ipvs: ih, nl: nh, dialCT: dialConntrack}, nil
}

// do runs one kernel call on the dataplane's sockets (see calls).
func (d *Dataplane) do(ctx context.Context, what string, fn func(h *handles) error) error {
	return d.calls.run(ctx, what, fn)
}

// Observe dumps every service with its destinations, the link's addresses
// and the shim's set members. Any failure fails the whole read: a partial
// dump must never look like a table that lost services.
func (d *Dataplane) Observe(ctx context.Context) (dataplane.Observation, error) {
	var took [3]time.Duration // IPVS, the link's addresses, the sets
	began := time.Now()
	obs, err := call(ctx, d.calls, "observe", func(h *handles) (dataplane.Observation, error) {
		obs := dataplane.Observation{State: model.NewState(), Conns: map[dataplane.RealRef]model.Conns{}}
		if err := dumpIPVS(h.ipvs, &obs); err != nil {
			return dataplane.Observation{}, err
		}
		took[0] = time.Since(began)
		addrs, err := d.listAddrs(h)
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
	// What a whole read costs by part: the drift check's repair bound
	// grows with it (README, "Drift made by anyone else").
	d.log.Log(logv.V(logv.Sync), "observed", zap.Int("services", len(obs.State.Services)), zap.Duration("ipvs", took[0]),
		zap.Int("addrs", len(obs.State.Addrs)), zap.Duration("addrs_took", took[1]),
		zap.Int("set_members", len(sets)), zap.Duration("sets", took[2]))
	return obs, nil
}

// Scan reads what Observe reads, but the counters, handing each entry to v
// as it is decoded: the same requests, no maps built.
func (d *Dataplane) Scan(ctx context.Context, v dataplane.Visitor) error {
	_, err := call(ctx, d.calls, "scan", func(h *handles) (struct{}, error) {
		return struct{}{}, d.scanTableAndAddrs(h, v)
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
func (d *Dataplane) scanTableAndAddrs(h *handles, v dataplane.Visitor) error {
	err := walkIPVS(h.ipvs, func(int, int) {}, func(vs model.VirtualServer, reals []realRead) {
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
	addrs, err := d.listAddrs(h)
	for _, a := range addrs {
		v.Addr(a)
	}
	return err
}

// Close releases the sockets; later calls fail.
func (d *Dataplane) Close() error {
	d.calls.close()
	d.Shim.close()
	return nil
}
