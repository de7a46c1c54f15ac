package model

import "net/netip"

// Flags are the IPVS service flags as the kernel stores them. IPVS has no
// named constants in moby/ipvs; these values are the kernel's
// IP_VS_SVC_F_* flags. An update overwrites all of them.
type Flags uint32

const (
	FlagPersistent Flags = 0x1
	FlagHashed     Flags = 0x2 // set by the kernel on every listed service
	FlagOnePacket  Flags = 0x4
	FlagSchedSH1   Flags = 0x8  // sh-fallback / mh-fallback
	FlagSchedSH2   Flags = 0x10 // sh-port / mh-port
	FlagSched3     Flags = 0x20 // flag-3: no scheduler in the kernel reads it
)

// ConfigFlags are the flags we set and compare; the kernel's own (hashed)
// are masked away so that a dump compares equal to what we asked for.
const ConfigFlags = FlagPersistent | FlagOnePacket | FlagSchedSH1 | FlagSchedSH2

// VirtualServer is the configuration of one IPVS service.
type VirtualServer struct {
	Key       VSKey
	Scheduler Scheduler
	Flags     Flags
	// Timeout is the persistence timeout in seconds (only with FlagPersistent).
	Timeout uint32
}

// Canonical is the virtual server as equality and hashing see it: every
// field, the flags masked to ConfigFlags. Two virtual servers are equal
// exactly when their canonical forms are ==, so whatever hashes the
// canonical form hashes what Equal compares, field for field.
func (v VirtualServer) Canonical() VirtualServer {
	v.Flags &= ConfigFlags
	return v
}

// Equal compares every field of the canonical forms.
func (v VirtualServer) Equal(o VirtualServer) bool { return v.Canonical() == o.Canonical() }

// String renders the service as an ipvsadm add line's options, in the order
// `ipvsadm -S` prints them (see ServiceRule): "-t 10.0.0.1:80 -s rr -p 10800".
func (v VirtualServer) String() string {
	return v.Key.String() + " " + ServiceRule{Scheduler: v.Scheduler, Flags: v.Flags, Timeout: v.Timeout}.String()
}

// Forwarding is how IPVS forwards to a real server. kube-ipvs uses masquerade
// (NAT) only, like kube-proxy; the others are here so a dump of foreign
// services is rendered truthfully.
type Forwarding uint32

const (
	Masq   Forwarding = 0
	Local  Forwarding = 1
	Tunnel Forwarding = 2
	Route  Forwarding = 3
	Bypass Forwarding = 4
)

// Flag is the ipvsadm option for the forwarding method. A method ipvsadm
// has no option for (bypass, or bits no kernel defines) prints as ipvsadm -S
// prints it: "(null)", glibc's text for the NULL name ipvsadm passes.
func (f Forwarding) Flag() string {
	switch f {
	case Masq:
		return "-m"
	case Tunnel:
		return "-i"
	case Route, Local:
		return "-g"
	}
	return "(null)"
}

// RealServer is one destination of a virtual server.
type RealServer struct {
	Addr    netip.AddrPort
	Weight  int
	Forward Forwarding
}

// String renders "-r 10.1.0.5:8080 -m -w 1" (see RealRule).
func (r RealServer) String() string {
	return RealRule{Addr: r.Addr.String(), Forward: r.Forward, Weight: r.Weight}.String()
}

// Conns are a real server's connection counters as the kernel reports them;
// they decide when a draining real server may go.
type Conns struct {
	Active   uint32
	Inactive uint32
}

// Total is every connection still pointing at the real server.
func (c Conns) Total() uint64 { return uint64(c.Active) + uint64(c.Inactive) }
