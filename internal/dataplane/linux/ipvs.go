//go:build linux

package linux

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The IPVS table is read and written with the package's own generic netlink
// codec (encode.go writes, genl_ipvs.go reads) on the dataplane's socket:
// writes batch, reads stream, and every request honours its deadline.

// realRead is one real server as a dump gives it, with its counters.
type realRead struct {
	rs model.RealServer
	c  model.Conns
}

// dumpServices reads every service, one dump, on the socket of wide
// datagrams.
func (d *Dataplane) dumpServices(ctx context.Context, h *handles) ([]model.VirtualServer, error) {
	var out []model.VirtualServer
	err := h.genlWide.query(ctx, d.ipvsFamily, unix.NLM_F_DUMP, genlMessage(ipvsCmdGetService, nil), func(m netlink.Message) error {
		return eachEntry(m.Data, cmdAttrService, func(v []byte) error {
			vs, err := tableService(v)
			out = append(out, vs)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list IPVS services: %w", err)
	}
	return out, nil
}

// dumpDests reads the destinations of the service k, one dump on sock,
// handing each to each as it is decoded.
func (d *Dataplane) dumpDests(ctx context.Context, sock *socket, k model.VSKey, each func(realRead)) error {
	af := uint16(unix.AF_INET)
	if k.IsIPv6() {
		af = unix.AF_INET6
	}
	return sock.query(ctx, d.ipvsFamily, unix.NLM_F_DUMP, keyRequest(ipvsCmdGetDest, k), func(m netlink.Message) error {
		return eachEntry(m.Data, cmdAttrDest, func(v []byte) error {
			r, err := tableDest(v, af)
			if err == nil {
				each(r)
			}
			return err
		})
	})
}

// dumpIPVS reads every service with its destinations into obs (the IPVS
// part of Observe).
func (d *Dataplane) dumpIPVS(ctx context.Context, h *handles, obs *dataplane.Observation) error {
	return d.walkIPVS(ctx, h, func(n int) {
		// Sized up front: maps grown from empty to 10,000 services and
		// 100,000 counters leave as much garbage again as they hold, every
		// read.
		obs.State.Services = make(map[model.VSKey]*model.Service, n)
		if len(obs.Conns) == 0 {
			obs.Conns = make(map[dataplane.RealRef]model.Conns, d.lastReals)
		}
	}, func(vs model.VirtualServer, reals []realRead) {
		rs := make([]model.RealServer, len(reals))
		for i, r := range reals {
			rs[i] = r.rs
			obs.Conns[dataplane.RealRef{VS: vs.Key, RS: r.rs.Addr}] = r.c
		}
		obs.State.Services[vs.Key] = &model.Service{VirtualServer: vs, Reals: model.RealsOf(rs)}
	})
}

// walkIPVS reads every service (one dump) and then each one's destinations
// (one dump each), and hands each service with its destinations to each
// (sized first learns how many services there are). The reals slice is
// each's only during the call.
//
// The kernel's listing (/proc/net/ip_vs) is not read: it restarts its walk
// of the table from the first service on every read(2), which returns at
// most a page, so a whole read costs the square of the table.
func (d *Dataplane) walkIPVS(ctx context.Context, h *handles, sized func(services int), each func(model.VirtualServer, []realRead)) error {
	svcs, err := d.dumpServices(ctx, h)
	if err != nil {
		return err
	}
	sized(len(svcs))
	var reals []realRead
	total := 0
	for _, vs := range svcs {
		reals = reals[:0]
		err := d.dumpDests(ctx, h.genl, vs.Key, func(r realRead) { reals = append(reals, r) })
		if err != nil {
			return fmt.Errorf("list real servers of %s: %w", vs.Key, err)
		}
		total += len(reals)
		each(vs, reals)
	}
	d.lastReals = total
	return nil
}

// keyRequest is an IPVS request of cmd naming the service k.
func keyRequest(cmd uint8, k model.VSKey) []byte {
	var e ipvsEncoder
	e.a.b = append(make([]byte, 0, 64), cmd, ipvsGenlVersion, 0, 0)
	e.serviceKey(k)
	return e.a.b
}

// Conns reads one service's destinations' counters, on the socket of wide
// datagrams: the kernel walks the service's destinations from the first
// again for every datagram it fills, so a read of thousands costs the
// square of them over the datagram's size. It is asked of the few services
// whose real servers drain, the largest among them.
func (d *Dataplane) Conns(ctx context.Context, vs model.VSKey) (map[netip.AddrPort]model.Conns, error) {
	out, err := call(ctx, d.calls, "read connections", func(ctx context.Context, h *handles) (map[netip.AddrPort]model.Conns, error) {
		out := map[netip.AddrPort]model.Conns{}
		err := d.dumpDests(ctx, h.genlWide, vs, func(r realRead) { out[r.rs.Addr] = r.c })
		if err != nil {
			return nil, destErrs.wrap(err)
		}
		if len(out) == 0 {
			// The kernel dumps no destinations for a missing service rather
			// than failing (checked on 6.1): ask for the service itself,
			// which answers ESRCH when it is missing.
			err := h.genl.query(ctx, d.ipvsFamily, 0, keyRequest(ipvsCmdGetService, vs), func(netlink.Message) error { return nil })
			if err != nil {
				return nil, serviceErrs.wrap(err)
			}
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read connections of %s: %w", vs, err)
	}
	return out, nil
}

// readTimeouts is IPVS_CMD_GET_CONFIG on the dataplane's socket.
func (d *Dataplane) readTimeouts(ctx context.Context, h *handles) (ipvstable.Timeouts, error) {
	var msgs []netlink.Message
	err := h.genl.query(ctx, d.ipvsFamily, 0, genlMessage(ipvsCmdGetConfig, nil), func(m netlink.Message) error {
		msgs = append(msgs, netlink.Message{Header: m.Header, Data: append([]byte(nil), m.Data...)})
		return nil
	})
	if err != nil {
		return ipvstable.Timeouts{}, err
	}
	return decodeTimeouts(msgs)
}

// SetTimeouts sets IPVS' connection timeouts, keeping those given as zero.
// The current values are read first so that what is sent is explicit.
func (d *Dataplane) SetTimeouts(ctx context.Context, t dataplane.Timeouts) error {
	if t == (dataplane.Timeouts{}) {
		return nil
	}
	err := d.do(ctx, "set IPVS timeouts", func(ctx context.Context, h *handles) error {
		cur, err := d.readTimeouts(ctx, h)
		if err != nil {
			return fmt.Errorf("read IPVS timeouts: %w", err)
		}
		if t.TCP != 0 {
			cur.TCP = uint32(t.TCP.Seconds())
		}
		if t.TCPFin != 0 {
			cur.TCPFin = uint32(t.TCPFin.Seconds())
		}
		if t.UDP != 0 {
			cur.UDP = uint32(t.UDP.Seconds())
		}
		var a attrBuf
		a.b = append(a.b, ipvsCmdSetConfig, ipvsGenlVersion, 0, 0)
		a.u32(cmdAttrTimeoutTCP, cur.TCP)
		a.u32(cmdAttrTimeoutFin, cur.TCPFin)
		a.u32(cmdAttrTimeoutUDP, cur.UDP)
		return h.genl.query(ctx, d.ipvsFamily, 0, a.b, func(netlink.Message) error { return nil })
	})
	if err != nil {
		return fmt.Errorf("set IPVS timeouts tcp=%s tcpfin=%s udp=%s: %w", t.TCP, t.TCPFin, t.UDP, err)
	}
	return nil
}
