package model

import (
	"fmt"
	"net/netip"
)

// OpKind is what an operation does. The constant order is the order
// operations are applied in: services exist before their reals, reals before
// their VIP is bound (a bound VIP always has its virtual server), and
// removals run in reverse so traffic is never sent to a half-built service.
//
// Shim set members are added after the virtual servers and reals and
// before the VIPs are bound, so a VIP goes live with its masquerading,
// source-range filter and reject rule already in force; they are removed
// last, after the VIP is gone, so a live VIP never loses its source-range
// filter (plan.Sort orders the members within their kinds). One member is
// the exception: a frontend's ownership record is added before anything
// else, ahead of the virtual server it records, so that no crash can leave
// a virtual server of ours that nothing names as ours.
type OpKind uint8

const (
	AddService OpKind = iota
	UpdateService
	AddReal
	UpdateReal
	AddSetEntry
	BindAddr
	DeleteReal
	DeleteService
	UnbindAddr
	DeleteSetEntry
)

// OpTarget is what an operation writes: the IPVS table (a virtual server
// or one of its real servers), an address on the link, or a member of one
// of the shim's sets. Each is a separate part of the kernel, reached
// through its own socket.
type OpTarget uint8

const (
	TargetTable OpTarget = iota
	TargetAddr
	TargetMember
)

// opKinds describes each kind: its name (as logs and the operations
// metric's op label spell it), what it writes, and whether it removes
// what it names.
var opKinds = [...]struct {
	name    string
	target  OpTarget
	removes bool
}{
	AddService:     {"add-service", TargetTable, false},
	UpdateService:  {"update-service", TargetTable, false},
	AddReal:        {"add-real", TargetTable, false},
	UpdateReal:     {"update-real", TargetTable, false},
	AddSetEntry:    {"add-set-entry", TargetMember, false},
	BindAddr:       {"bind-addr", TargetAddr, false},
	DeleteReal:     {"delete-real", TargetTable, true},
	DeleteService:  {"delete-service", TargetTable, true},
	UnbindAddr:     {"unbind-addr", TargetAddr, true},
	DeleteSetEntry: {"delete-set-entry", TargetMember, true},
}

func (k OpKind) String() string {
	if int(k) < len(opKinds) {
		return opKinds[k].name
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Target is what an operation of kind k writes.
func (k OpKind) Target() OpTarget {
	if int(k) < len(opKinds) {
		return opKinds[k].target
	}
	return TargetTable
}

// Removes tells whether an operation of kind k takes out what it names:
// the deletes and the unbind.
func (k OpKind) Removes() bool { return int(k) < len(opKinds) && opKinds[k].removes }

// Op is one operation: one write to the kernel. The plan makes them, a
// dataplane applies them and the cache of the kernel's state follows them.
// Only the fields its Kind names are read.
type Op struct {
	Kind OpKind
	// VS is the whole virtual server for AddService/UpdateService; only its
	// Key matters for the other kinds.
	VS VirtualServer
	// RS is the real server for the *Real kinds (only Addr for DeleteReal).
	RS RealServer
	// Addr is the VIP for BindAddr/UnbindAddr.
	Addr netip.Addr
	// Entry is the set member for AddSetEntry/DeleteSetEntry.
	Entry SetEntry
}

// String renders the operation as the ipvsadm (or ip, or ipset) command
// that would make the same change, a VIP bound as an address.
func (o Op) String() string { return o.Command(false) }

// Command renders the operation as the ipvsadm (or ip, or ipset) command
// that would make the same change, a VIP bound as a local route when
// localRoutes is set and as an address otherwise; this is what --dry-run
// prints and logs show.
func (o Op) Command(localRoutes bool) string {
	if localRoutes && (o.Kind == BindAddr || o.Kind == UnbindAddr) {
		verb := "add"
		if o.Kind == UnbindAddr {
			verb = "del"
		}
		return "ip route " + verb + " local " + hostPrefix(o.Addr) + " table local"
	}
	k := o.VS.Key
	switch o.Kind {
	case AddService:
		return "-A " + o.VS.String()
	case UpdateService:
		return "-E " + o.VS.String()
	case AddReal:
		return "-a " + k.String() + " " + o.RS.String()
	case UpdateReal:
		return "-e " + k.String() + " " + o.RS.String()
	case DeleteReal:
		return "-d " + k.String() + " -r " + o.RS.Addr.String()
	case DeleteService:
		return "-D " + k.String()
	case BindAddr:
		return "ip addr add " + hostPrefix(o.Addr)
	case UnbindAddr:
		return "ip addr del " + hostPrefix(o.Addr)
	case AddSetEntry:
		return "ipset add " + o.Entry.String()
	case DeleteSetEntry:
		return "ipset del " + o.Entry.String()
	}
	return o.Kind.String()
}

// Target is what the operation writes.
func (o Op) Target() OpTarget { return o.Kind.Target() }

// hostPrefix renders a VIP as the host prefix bound on the link.
func hostPrefix(a netip.Addr) string {
	return netip.PrefixFrom(a, a.BitLen()).String()
}

// ApplyTo records the operation's effect in s, so that the observed state
// cache can follow what was applied without re-reading the kernel.
func (o Op) ApplyTo(s *State) {
	k := o.VS.Key
	switch o.Kind {
	case AddService:
		s.Services[k] = &Service{VirtualServer: o.VS}
	case UpdateService:
		if svc, ok := s.Services[k]; ok {
			svc.VirtualServer = o.VS
		}
	case AddReal, UpdateReal:
		if svc, ok := s.Services[k]; ok {
			svc.Reals.Set(o.RS)
		}
	case DeleteReal:
		if svc, ok := s.Services[k]; ok {
			svc.Reals.Delete(o.RS.Addr)
		}
	case DeleteService:
		delete(s.Services, k)
	case BindAddr:
		s.Addrs[o.Addr] = struct{}{}
	case UnbindAddr:
		delete(s.Addrs, o.Addr)
	case AddSetEntry:
		if s.Sets == nil {
			s.Sets = map[SetEntry]struct{}{}
		}
		s.Sets[o.Entry] = struct{}{}
	case DeleteSetEntry:
		delete(s.Sets, o.Entry)
	}
}
