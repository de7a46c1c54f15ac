//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Sysctls IPVS needs on every kernel (the same kube-proxy's IPVS mode sets):
//   - vs/conntrack=1: keep conntrack entries for IPVS connections, which the
//     masquerade rules and the conntrack cleanup of UDP real servers need;
//   - vs/expire_nodest_conn=1: drop a connection's entry once its real
//     server is deleted, so the next packet is rescheduled;
//   - vs/expire_quiescent_template=1: expire persistence templates of a
//     real server at weight 0, so a draining endpoint gets no new clients;
//   - ip_forward=1: NATed traffic to a pod on another node is forwarded.
var requiredSysctls = []string{
	"net/ipv4/vs/conntrack",
	"net/ipv4/vs/expire_nodest_conn",
	"net/ipv4/vs/expire_quiescent_template",
	"net/ipv4/ip_forward",
}

const sysctlConnReuse = "net/ipv4/vs/conn_reuse_mode"

// strictARPSysctls keep a node from answering ARP for the VIPs bound on
// kube-ipvs0 (arp_ignore=1: answer only for addresses of the receiving
// interface) and from using them as ARP sources (arp_announce=2), so a VIP
// announced by one node (MetalLB layer 2) is not claimed by all of them.
var strictARPSysctls = map[string]string{
	"net/ipv4/conf/all/arp_ignore":   "1",
	"net/ipv4/conf/all/arp_announce": "2",
}

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE (linux/if_link.h): the kernel
// gives the link no IPv6 address of its own.
const addrGenModeNone = 1

// Init creates the dummy link if it is missing, brings it up without an
// IPv6 link-local address, and sets the sysctls. Running it again changes
// nothing that is already right.
func (d *Dataplane) Init(ctx context.Context) error {
	err := d.do(ctx, "init", func(_ context.Context, h *handles) error {
		link, err := d.ensureLink(h.nl)
		if err != nil {
			return err
		}
		if err := d.noLinkLocal(h.nl, link); err != nil {
			return err
		}
		if err := h.nl.LinkSetUp(link); err != nil {
			return fmt.Errorf("set link %s up: %w", d.linkName, err)
		}
		return d.deleteLinkLocal(h.nl, link)
	})
	if err != nil {
		return fmt.Errorf("init dataplane: %w", err)
	}
	if err := d.setSysctls(); err != nil {
		return fmt.Errorf("init dataplane: %w", err)
	}
	d.tuneConntrack()
	return nil
}

// tuneConntrack writes kube-proxy's nf_conntrack settings. A value the
// kernel refuses is logged, not fatal: nf_conntrack_max is writable only
// from the node's own network namespace, and load balancing works without
// the tuning (kube-proxy goes on likewise when sysfs is read-only). The
// hash table grows with the limit, to a quarter of it, as kube-proxy sizes it.
func (d *Dataplane) tuneConntrack() {
	cpus := runtime.NumCPU()
	for _, s := range d.tuning.Sysctls(cpus) {
		if err := d.writeSysctl(s.Key, s.Value); err != nil {
			d.log.Warn("conntrack setting not applied", zap.Error(err))
		}
	}
	m := d.tuning.Max(cpus)
	if m == 0 {
		return
	}
	p := filepath.Join(d.sysModule, "nf_conntrack/parameters/hashsize")
	cur, err := os.ReadFile(p)
	if n, perr := strconv.Atoi(strings.TrimSpace(string(cur))); err != nil || perr != nil || n >= m/4 {
		return
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(m/4)), 0o644); err != nil {
		d.log.Warn("conntrack hash size not raised", zap.Int("want", m/4), zap.Error(err))
	}
}

func (d *Dataplane) ensureLink(h *netlink.Handle) (netlink.Link, error) {
	link, err := h.LinkByName(d.linkName)
	if err == nil {
		if link.Type() != "dummy" {
			// kube-proxy made it a dummy too; anything else was made by
			// someone else, but its addresses still make VIPs local.
			d.log.Warn("VIP link is not a dummy link", zap.String("link", d.linkName), zap.String("type", link.Type()))
		}
		return link, nil
	}
	if !isLinkNotFound(err) {
		return nil, fmt.Errorf("look up link %s: %w", d.linkName, err)
	}
	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: d.linkName}}
	if err := h.LinkAdd(dummy); err != nil {
		return nil, fmt.Errorf("create dummy link %s: %w", d.linkName, err)
	}
	link, err = h.LinkByName(d.linkName)
	if err != nil {
		return nil, fmt.Errorf("look up link %s after creating it: %w", d.linkName, err)
	}
	return link, nil
}

// noLinkLocal turns off IPv6 address generation on the link before it
// comes up. An up link otherwise gets a link-local address (fe80::/64 from
// its random MAC): the node would then send router and multicast listener
// solicitations from kube-ipvs0 and answer on that address, which nobody
// asked for. kube-proxy leaves its link down instead; keeping
// ours up keeps the VIP behaviour the VM suites check, with nothing else on
// the link. A kernel without IPv6 has nothing to turn off.
func (d *Dataplane) noLinkLocal(h *netlink.Handle, link netlink.Link) error {
	if _, err := os.Stat(filepath.Join(d.procSys, "net/ipv6/conf", d.linkName)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := h.LinkSetIP6AddrGenMode(link, addrGenModeNone); err != nil {
		return fmt.Errorf("turn off IPv6 address generation on %s: %w", d.linkName, err)
	}
	return nil
}

// deleteLinkLocal removes the link-local addresses a link brought up
// before address generation was off still holds (one made by an earlier
// version, or by hand). They are never VIPs: a Service cannot have one.
func (d *Dataplane) deleteLinkLocal(h *netlink.Handle, link netlink.Link) error {
	list, err := h.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("list IPv6 addresses of %s: %w", d.linkName, err)
	}
	for _, a := range list {
		if !a.IP.IsLinkLocalUnicast() {
			continue
		}
		if err := h.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("delete link-local address %s of %s: %w", a.IP, d.linkName, err)
		}
	}
	return nil
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// setSysctls writes the sysctls IPVS needs, and conn_reuse_mode by kernel
// version (see dataplane.ConnReuseFor).
func (d *Dataplane) setSysctls() error {
	var errs []error
	for _, k := range requiredSysctls {
		if err := d.writeSysctl(k, "1"); err != nil {
			errs = append(errs, err)
		}
	}
	if d.strict {
		for k, v := range strictARPSysctls {
			if err := d.writeSysctl(k, v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	release, err := os.ReadFile(filepath.Join(d.procSys, "kernel/osrelease"))
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("read kernel release: %w", err))...)
	}
	v, err := dataplane.ParseKernelVersion(string(release))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	switch dataplane.ConnReuseFor(v) {
	case dataplane.ConnReuseSetZero:
		if err := d.writeSysctl(sysctlConnReuse, "0"); err != nil {
			errs = append(errs, err)
		}
	case dataplane.ConnReuseUnsupported:
		d.log.Warn("kernel too old to set conn_reuse_mode", zap.String("kernel", v.String()))
	}
	return errors.Join(errs...)
}

// writeSysctl writes value unless the sysctl already holds it.
func (d *Dataplane) writeSysctl(key, value string) error {
	p := filepath.Join(d.procSys, key)
	cur, err := os.ReadFile(p)
	if err == nil && strings.TrimSpace(string(cur)) == value {
		return nil
	}
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("set sysctl %s=%s: %w", strings.ReplaceAll(key, "/", "."), value, err)
	}
	return nil
}

// dumpTries is how many times an interrupted dump of the link's VIPs is
// read.
const dumpTries = 3

// rereadInterrupted runs read, again while the kernel reports the dump
// interrupted (the host's addresses or routes changed under it, on any
// link), at most dumpTries times; it returns read's last error.
func rereadInterrupted(read func() error) error {
	err := read()
	for try := 1; try < dumpTries && errors.Is(err, errDumpInterrupted); try++ {
		err = read()
	}
	return err
}

// listAddrs returns the VIPs on the link: every address but IPv6
// link-local ones, which the kernel adds to any up link, and every local
// route the agent made through it (see routeEncoder), each VIP once
// whichever way it is bound, so that VIPs bound one way by an earlier run
// or by kube-proxy are read, kept or unbound alike. A missing link holds
// nothing. An interrupted dump is read again; one interrupted dumpTries
// times is an error, never a short list.
func (d *Dataplane) listAddrs(ctx context.Context, h *handles) ([]netip.Addr, error) {
	index, found, err := d.linkIndex(h)
	if err != nil || !found {
		return nil, err
	}
	var out []netip.Addr
	err = rereadInterrupted(func() (err error) {
		out, err = dumpAddrs(ctx, h.rt, index, out[:0])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", d.linkName, err)
	}
	bound := len(out)
	if out, err = d.readLocalRoutes(ctx, h, index, out); err != nil {
		return nil, err
	}
	if len(out) > bound { // routes beside addresses: a VIP may be both
		slices.SortFunc(out, netip.Addr.Compare)
		out = slices.Compact(out)
	}
	return out, nil
}

// linkIndex is the link's index; found is false, with no error, when
// the link does not exist: it then binds nothing.
func (d *Dataplane) linkIndex(h *handles) (index int32, found bool, err error) {
	link, err := d.linkFor(h)
	if errors.Is(err, dataplane.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return int32(link.Attrs().Index), true, nil
}

// readLocalRoutes appends to out the VIPs bound as the agent's local
// routes through the link at index, reading again a dump the kernel
// interrupted.
func (d *Dataplane) readLocalRoutes(ctx context.Context, h *handles, index int32, out []netip.Addr) ([]netip.Addr, error) {
	n := len(out)
	err := rereadInterrupted(func() (err error) {
		out, err = dumpLocalRoutes(ctx, h.routes, index, out[:n])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list local routes through %s: %w", d.linkName, err)
	}
	return out, nil
}

// linkFor finds the link or says it does not exist.
func (d *Dataplane) linkFor(h *handles) (netlink.Link, error) {
	link, err := h.nl.LinkByName(d.linkName)
	if isLinkNotFound(err) {
		return nil, fmt.Errorf("link %s: %w", d.linkName, dataplane.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("look up link %s: %w", d.linkName, err)
	}
	return link, nil
}

// DeleteLink removes the link and with it every VIP; the IPVS table stays.
func (d *Dataplane) DeleteLink(ctx context.Context) error {
	err := d.do(ctx, "delete link", func(_ context.Context, h *handles) error {
		link, err := d.linkFor(h)
		if err != nil {
			return err
		}
		return addrErrs.wrap(h.nl.LinkDel(link))
	})
	if err != nil {
		return fmt.Errorf("delete link %s: %w", d.linkName, err)
	}
	return nil
}

// LinkFamilies reads whether IPv6 is usable on the link: the link's own
// disable_ipv6, or, before the link exists, conf/default's (which a link
// made later starts from). A kernel without IPv6 (ipv6.disable=1) has no
// net/ipv6 sysctls at all: kube-proxy finds the same kernel by its missing
// /proc/net/if_inet6 and runs single-stack IPv4 there.
func (d *Dataplane) LinkFamilies(ctx context.Context) (model.Families, error) {
	if err := ctx.Err(); err != nil {
		return model.Families{}, err
	}
	conf := filepath.Join(d.procSys, "net/ipv6/conf")
	for _, dev := range []string{d.linkName, "default"} {
		b, err := os.ReadFile(filepath.Join(conf, dev, "disable_ipv6"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return model.Families{}, fmt.Errorf("read IPv6 state of %s: %w", dev, err)
		}
		return model.Families{IPv4: true, IPv6: strings.TrimSpace(string(b)) == "0"}, nil
	}
	return model.Families{IPv4: true}, nil
}

// Probe asks IPVS for its configuration and rtnetlink for the link, on the
// sockets every change goes through: both answer unless the kernel refuses
// the agent as a whole (see dataplane.Dataplane.Probe).
func (d *Dataplane) Probe(ctx context.Context) error {
	err := d.do(ctx, "probe", func(ctx context.Context, h *handles) error {
		if _, err := d.readTimeouts(ctx, h); err != nil {
			return fmt.Errorf("read IPVS configuration: %w", err)
		}
		_, err := d.linkFor(h)
		return err
	})
	if err != nil {
		return fmt.Errorf("probe the kernel: %w", err)
	}
	return nil
}

// DeleteLocalRoutes removes every VIP bound as a local route through the
// link (see Options.LocalRoutes) and returns those it removed; addresses
// stay. A node handed back to kube-proxy wants it once kube-proxy has bound
// every VIP as an address: a route left behind would keep a VIP the
// node's after kube-proxy unbinds it.
func (d *Dataplane) DeleteLocalRoutes(ctx context.Context) ([]netip.Addr, error) {
	var gone []netip.Addr
	err := d.do(ctx, "delete local routes", func(ctx context.Context, h *handles) error {
		index, found, err := d.linkIndex(h)
		if err != nil || !found {
			return err
		}
		vips, err := d.readLocalRoutes(ctx, h, index, nil)
		if err != nil {
			return err
		}
		slices.SortFunc(vips, netip.Addr.Compare)
		vips = slices.Compact(vips)
		for win := range slices.Chunk(vips, batchWindow) {
			var enc routeEncoder
			reqs, errs := make([]request, len(win)), make([]error, len(win))
			for i, a := range win {
				reqs[i] = enc.change(index, false, a)
			}
			if err := h.rt.exchange(ctx, reqs, errs); err != nil {
				return err
			}
			for i, a := range win {
				switch e := addrErrs.wrap(errs[i]); {
				case e == nil:
					gone = append(gone, a)
				case !errors.Is(e, dataplane.ErrNotExist): // gone meanwhile: nothing to do
					return fmt.Errorf("delete local route to %s: %w", a, e)
				}
			}
		}
		return nil
	})
	return gone, err
}
