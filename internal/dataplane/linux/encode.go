//go:build linux

package linux

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// The encoders below write a window's requests into one buffer each (a
// request's payload is a slice of it), with the attributes ipvsadm and
// ip(8) send. A slice stays valid when the buffer grows: append copies
// into a new array and leaves the old one, which nothing writes again.

const (
	afInet  = unix.AF_INET
	afInet6 = unix.AF_INET6

	netlinkGeneric   = unix.NETLINK_GENERIC
	netlinkRoute     = unix.NETLINK_ROUTE
	netlinkNetfilter = unix.NETLINK_NETFILTER

	// IPVS commands (include/uapi/linux/ip_vs.h).
	ipvsCmdNewService = 1
	ipvsCmdSetService = 2
	ipvsCmdDelService = 3
	ipvsCmdNewDest    = 5
	ipvsCmdSetDest    = 6
	ipvsCmdDelDest    = 7
)

// encodeBufSize fits a window of the largest requests (an IPv6 service,
// about 100 bytes) without growing.
const encodeBufSize = batchWindow * 112

type ipvsEncoder struct{ a attrBuf }

// ipvsCmds is the IPVS command of each kind of operation on the table.
var ipvsCmds = [...]uint8{
	model.AddService:    ipvsCmdNewService,
	model.UpdateService: ipvsCmdSetService,
	model.DeleteService: ipvsCmdDelService,
	model.AddReal:       ipvsCmdNewDest,
	model.UpdateReal:    ipvsCmdSetDest,
	model.DeleteReal:    ipvsCmdDelDest,
}

// change encodes one IPVS operation as a request to the IPVS family: a
// create or update carries the whole service, any other names it by its
// key; a destination's create or update carries the whole destination, its
// delete only its address.
func (e *ipvsEncoder) change(family uint16, c model.Op) request {
	if e.a.b == nil {
		e.a.b = make([]byte, 0, encodeBufSize)
	}
	start := len(e.a.b)
	e.a.b = append(e.a.b, ipvsCmds[c.Kind], ipvsGenlVersion, 0, 0)
	switch cmd := ipvsCmds[c.Kind]; cmd {
	case ipvsCmdNewService, ipvsCmdSetService:
		e.service(c.VS)
	case ipvsCmdDelService:
		e.serviceKey(c.VS.Key)
	default:
		e.serviceKey(c.VS.Key)
		e.dest(c.RS, cmd != ipvsCmdDelDest)
	}
	return request{typ: family, data: e.a.b[start:]}
}

// keyAttrs names a service: family, then mark or protocol, address, port.
func (e *ipvsEncoder) keyAttrs(k model.VSKey) {
	af := uint16(afInet)
	if k.IsIPv6() {
		af = afInet6
	}
	e.a.u16(svcAttrAF, af)
	if k.FWMark != 0 {
		e.a.u32(svcAttrFWMark, k.FWMark)
		return
	}
	e.a.u16(svcAttrProtocol, uint16(k.Proto))
	e.addr(svcAttrAddr, k.Addr)
	e.a.be16(svcAttrPort, k.Port)
}

// serviceKey is the service nest of a request about a service or its
// destinations: the kernel reads only the key there.
func (e *ipvsEncoder) serviceKey(k model.VSKey) {
	at := e.a.nest(cmdAttrService)
	e.keyAttrs(k)
	e.a.end(at)
}

// service is the whole service of a create or update. The netmask is the
// persistence granularity, a whole client address (see fillKey); the hashed
// flag is the kernel's own and never sent.
func (e *ipvsEncoder) service(vs model.VirtualServer) {
	at := e.a.nest(cmdAttrService)
	e.keyAttrs(vs.Key)
	e.a.str(svcAttrSchedName, string(vs.Scheduler))
	var flags [8]byte
	binary.NativeEndian.PutUint32(flags[:4], uint32(vs.Flags&^model.FlagHashed))
	binary.NativeEndian.PutUint32(flags[4:], 0xffffffff) // mask: every flag is set as given
	e.a.put(svcAttrFlags, flags[:])
	e.a.u32(svcAttrTimeout, vs.Timeout)
	mask := uint32(0xffffffff)
	if vs.Key.IsIPv6() {
		mask = 128
	}
	e.a.u32(svcAttrNetmask, mask)
	e.a.end(at)
}

// dest is a destination; a delete names it by address and port only.
func (e *ipvsEncoder) dest(rs model.RealServer, full bool) {
	at := e.a.nest(cmdAttrDest)
	e.addr(destAttrAddr, rs.Addr.Addr())
	e.a.be16(destAttrPort, rs.Addr.Port())
	if full {
		e.a.u32(destAttrFwdMethod, uint32(rs.Forward)&fwdMask)
		e.a.u32(destAttrWeight, uint32(rs.Weight))
		e.a.u32(destAttrUThresh, 0)
		e.a.u32(destAttrLThresh, 0)
	}
	e.a.end(at)
}

// addr puts an address as IPVS takes it: 4 bytes for IPv4, 16 for IPv6.
func (e *ipvsEncoder) addr(typ uint16, a netip.Addr) {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		e.a.put(typ, b[:])
		return
	}
	b := a.As16()
	e.a.put(typ, b[:])
}

type addrEncoder struct{ a attrBuf }

// change encodes RTM_NEWADDR (exclusive create) or RTM_DELADDR of a host
// address (/32, /128) on the link with index ifindex. An IPv6 one skips
// duplicate address detection: a VIP is every node's at once, so detection
// would only delay it (a dummy link skips it anyway; this says so).
func (e *addrEncoder) change(ifindex int32, add bool, addr netip.Addr) request {
	if e.a.b == nil {
		e.a.b = make([]byte, 0, encodeBufSize)
	}
	start := len(e.a.b)
	addr = addr.Unmap()
	var flags uint8
	if addr.Is6() {
		flags = unix.IFA_F_NODAD
	}
	// struct ifaddrmsg: family, prefix length, flags, scope, index.
	e.a.b = append(e.a.b, addrFamily(addr), uint8(addr.BitLen()), flags, unix.RT_SCOPE_UNIVERSE)
	e.a.b = binary.NativeEndian.AppendUint32(e.a.b, uint32(ifindex))
	ip := addr.AsSlice()
	e.a.put(unix.IFA_LOCAL, ip)
	e.a.put(unix.IFA_ADDRESS, ip)
	r := request{typ: unix.RTM_DELADDR, data: e.a.b[start:]}
	if add {
		r.typ, r.flags = unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL
	}
	return r
}

// rtprotKubeIPVS marks the local routes the agent makes (rtm_protocol): a
// number no routing daemon in iproute2's rt_protos claims, so that neither
// the kernel's own local route of an address nor anyone else's route is
// read or deleted as a VIP.
const rtprotKubeIPVS = 243

type routeEncoder struct{ a attrBuf }

// change encodes RTM_NEWROUTE (exclusive create) or RTM_DELROUTE of a
// local route to one VIP (/32, /128) through the link with index ifindex,
// in the local table: the route the kernel makes for an address of its
// own, without the address. Packets to the VIP are delivered to the node,
// where IPVS takes them, and the link's address list stays empty.
func (e *routeEncoder) change(ifindex int32, add bool, addr netip.Addr) request {
	if e.a.b == nil {
		e.a.b = make([]byte, 0, encodeBufSize)
	}
	start := len(e.a.b)
	addr = addr.Unmap()
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope,
	// type, flags.
	e.a.b = append(e.a.b, addrFamily(addr), uint8(addr.BitLen()), 0, 0,
		unix.RT_TABLE_LOCAL, rtprotKubeIPVS, unix.RT_SCOPE_HOST, unix.RTN_LOCAL)
	e.a.b = binary.NativeEndian.AppendUint32(e.a.b, 0)
	e.a.put(unix.RTA_DST, addr.AsSlice())
	e.a.u32(unix.RTA_OIF, uint32(ifindex))
	r := request{typ: unix.RTM_DELROUTE, data: e.a.b[start:]}
	if add {
		r.typ, r.flags = unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL
	}
	return r
}
