// Package ipvsadm renders the IPVS table exactly as ipvsadm 1.31 prints it
// (byte for byte: operators' scripts parse it), and parses ipvsadm's listing
// options. It is pure: the kernel is read elsewhere (dataplane/linux) and
// handed in as a Listing; name lookups go through the Names interface.
//
// The formats follow ipvsadm 1.31's ipvsadm.c (print_title,
// print_service_entry, print_conn, list_all, list_timeout, list_daemon) and
// libipvs (sorting, the netlink attribute parsing), including their quirks,
// each noted where it is reproduced.
package ipvsadm

import "net/netip"

// Address families as the kernel numbers them (AF_INET, AF_INET6).
const (
	AFInet  uint16 = 2
	AFInet6 uint16 = 10
)

// IP protocol numbers IPVS serves.
const (
	ProtoTCP  uint16 = 6
	ProtoUDP  uint16 = 17
	ProtoSCTP uint16 = 132
)

// Service flags (include/uapi/linux/ip_vs.h).
const (
	FlagPersistent uint32 = 0x1
	FlagHashed     uint32 = 0x2
	FlagOnePacket  uint32 = 0x4
	FlagSched1     uint32 = 0x8  // sh-fallback, mh-fallback, flag-1
	FlagSched2     uint32 = 0x10 // sh-port, mh-port, flag-2
	FlagSched3     uint32 = 0x20 // flag-3
)

// Forwarding methods: the low three bits of a destination's conn flags.
const (
	FwdMasq    uint32 = 0
	FwdLocal   uint32 = 1
	FwdTunnel  uint32 = 2
	FwdRoute   uint32 = 3
	FwdBypass  uint32 = 4
	FwdMask    uint32 = 0x7
	fwdUnknown        = "(null)" // what glibc's printf prints for ipvsadm's NULL name
)

// Tunnel types and encapsulation flags of a tunnelling destination.
const (
	TunIPIP uint8 = 0
	TunGUE  uint8 = 1
	TunGRE  uint8 = 2
)

// Listing is everything ipvsadm's listings show, as read from the kernel.
type Listing struct {
	Info     Info
	Services []Service // in the kernel's dump order
	Timeouts Timeouts
	Daemons  []Daemon
}

// Info is IPVS_CMD_GET_INFO: the version ("1.2.1" is 0x010201) and the size
// of the connection hash table.
type Info struct {
	Version     uint32
	ConnTabSize uint32
}

// Timeouts are IPVS_CMD_GET_CONFIG's, in seconds.
type Timeouts struct {
	TCP, TCPFin, UDP uint32
}

// Stats are one service's or destination's counters and rate estimates,
// 64 bits wide as IPVS_*_ATTR_STATS64 carries them.
type Stats struct {
	Conns, InPkts, OutPkts, InBytes, OutBytes uint64
	CPS, InPPS, OutPPS, InBPS, OutBPS         uint64
}

// Service is one IPVS virtual service with its destinations.
type Service struct {
	// AF is the address family; for a fwmark service it is the only trace
	// of the family (Addr is then invalid).
	AF       uint16
	Protocol uint16 // zero for a fwmark service
	Addr     netip.Addr
	Port     uint16
	FWMark   uint32

	Scheduler string
	Flags     uint32
	Timeout   uint32 // persistence timeout, seconds
	// Netmask is the persistence granularity. IPv4: the mask as a
	// big-endian number (0xffffffff is /32). IPv6: a prefix length.
	Netmask uint32
	PEName  string // persistence engine ("sip"), empty when none

	Stats Stats
	Dests []Dest // in the kernel's dump order
}

// Dest is one real server.
type Dest struct {
	AF        uint16 // may differ from the service's for tunnelling only
	Addr      netip.Addr
	Port      uint16
	ConnFlags uint32 // forwarding method in FwdMask
	Weight    int32

	UThreshold, LThreshold                uint32
	ActiveConns, InactConns, PersistConns uint32

	TunType  uint8
	TunPort  uint16
	TunFlags uint16

	Stats Stats
}

// Daemon is one connection-sync daemon (IPVS_CMD_GET_DAEMON).
type Daemon struct {
	State      uint32 // 1 master, 2 backup
	MCastIfn   string
	SyncID     uint32
	SyncMaxLen uint32
	MCastGroup netip.Addr // invalid when the kernel does not say
	MCastPort  uint16
	MCastTTL   uint8
}

// DefaultNetmask is the persistence netmask a service has when none was
// given (ipvsadm omits it from its output).
func DefaultNetmask(af uint16) uint32 {
	if af == AFInet6 {
		return 128
	}
	return 0xffffffff
}
