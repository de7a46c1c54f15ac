// Package ipvstable is the IPVS table as the kernel reports it over generic
// netlink: every virtual service with its persistence settings and 64-bit
// counters, every destination with its thresholds and tunnel settings, the
// timeouts, the version and the connection-sync daemons.
//
// It is plain data and sits below both of its users: dataplane/linux reads
// the kernel into it (only that package speaks netlink) and ipvsadm renders
// it. Neither knows the other (the kernel reader does not import the
// renderer); cmd/kube-ipvs joins them.
// Protocols, flags and forwarding methods are model's: one set of constants.
package ipvstable

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Address families as the kernel numbers them (AF_INET, AF_INET6).
const (
	AFInet  uint16 = 2
	AFInet6 uint16 = 10
)

// Tunnel types of a tunnelling destination.
const (
	TunIPIP uint8 = 0
	TunGUE  uint8 = 1
	TunGRE  uint8 = 2
)

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
	Protocol model.Protocol // zero for a fwmark service
	Addr     netip.Addr
	Port     uint16
	FWMark   uint32

	Scheduler string
	Flags     model.Flags
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
	AF      uint16 // may differ from the service's for tunnelling only
	Addr    netip.Addr
	Port    uint16
	Forward model.Forwarding // the forwarding bits of the kernel's conn flags
	Weight  int32

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
