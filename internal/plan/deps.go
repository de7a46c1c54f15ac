package plan

import (
	"net/netip"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/shim"
)

// A Dep is an outcome that later operations of the same apply depend on:
// an operation whose Needs holds a Dep the apply withheld is not sent.
// What withholds a Dep is a failed operation (Withheld), or an operation
// held back for want of a Dep that withholds more in turn (Dep.Withholds).
// The plan's order puts every operation after those it depends on.
type Dep struct {
	Kind DepKind
	// VS is the frontend of VSMade and VSRecorded.
	VS model.VSKey
	// Addr is the address of AddrReady and AddrReleased.
	Addr netip.Addr
}

// DepKind is what a Dep says went through.
type DepKind uint8

const (
	noDep DepKind = iota
	// VSMade: the virtual server VS was created. Its real servers cannot
	// exist without it, and a set member naming it would mark and filter
	// a frontend that is not there.
	VSMade
	// VSRecorded: frontend VS's ownership record (its shim.Frontends
	// member) was written, or was there. A virtual server made unrecorded
	// could be left, after a crash, owned by nobody: without its record
	// its create and its real servers count as not made.
	VSRecorded
	// AddrReady: the virtual servers on Addr were created and deleted as
	// planned, and the members that guard it (its source-range filter, its
	// VIPs member) are in place, so Addr may be bound or unbound. A bound
	// VIP always has its virtual server (else traffic to it is accepted
	// locally and dropped); a VIP goes live filtered, and answers only on
	// its frontends' ports; and a VIP whose virtual server could not be
	// deleted stays bound, the binding being what makes the server ours so
	// that the next sync can still remove it.
	AddrReady
	// AddrReleased: Addr's virtual servers were deleted and it was
	// unbound, so its set members may go. While it is still bound its
	// members stay, its VIPs member above all, or the address would answer
	// on every port a host socket listens on.
	AddrReleased
)

// Deps are an operation's Deps; a zero Dep is none.
type Deps [2]Dep

// IsZero tells whether d is none.
func (d Dep) IsZero() bool { return d.Kind == noDep }

func made(k model.VSKey) Dep     { return Dep{Kind: VSMade, VS: k} }
func recorded(k model.VSKey) Dep { return Dep{Kind: VSRecorded, VS: k} }
func ready(a netip.Addr) Dep     { return Dep{Kind: AddrReady, Addr: a} }
func released(a netip.Addr) Dep  { return Dep{Kind: AddrReleased, Addr: a} }

// needs is, per kind, what an operation of that kind depends on (nil:
// nothing).
var needs = [...]func(op model.Op) Deps{
	model.AddService: func(op model.Op) Deps { return Deps{recorded(op.VS.Key)} },
	model.AddReal:    func(op model.Op) Deps { return Deps{recorded(op.VS.Key), made(op.VS.Key)} },
	model.UpdateReal: func(op model.Op) Deps { return Deps{made(op.VS.Key)} },
	model.BindAddr:   func(op model.Op) Deps { return Deps{ready(op.Addr)} },
	model.UnbindAddr: func(op model.Op) Deps { return Deps{ready(op.Addr)} },
	model.AddSetEntry: func(op model.Op) Deps {
		var d Deps
		if stage(op) < 0 {
			return d // an ownership record goes first: it waits on nothing
		}
		if shim.KindOf(op.Entry) == shim.VIPs {
			d[0] = ready(op.Entry.Addr()) // a VIPs member follows its address's bind
		}
		if k, ok := FrontendOf(op.Entry); ok {
			d[1] = made(k)
		}
		return d
	},
	model.DeleteSetEntry: func(op model.Op) Deps { return Deps{released(op.Entry.Addr())} },
}

// withheld is, per kind, what a failed operation of that kind withholds
// (nil: nothing); exists says the kernel refused it because what it makes
// is there already (dataplane.ErrExist).
var withheld = [...]func(op model.Op, exists bool) Deps{
	// Refused as existing, the virtual server is someone else's: not ours
	// to fill, bind or record either.
	model.AddService: func(op model.Op, _ bool) Deps { return Deps{made(op.VS.Key), ready(op.VS.Key.Addr)} },
	model.DeleteService: func(op model.Op, _ bool) Deps {
		return Deps{ready(op.VS.Key.Addr), released(op.VS.Key.Addr)}
	},
	model.UnbindAddr: func(op model.Op, _ bool) Deps { return Deps{released(op.Addr)} },
	model.AddSetEntry: func(op model.Op, exists bool) Deps {
		var d Deps
		kind := shim.KindOf(op.Entry)
		if kind.GuardsVIP() {
			d[0] = ready(op.Entry.Addr())
		}
		if k, _ := FrontendOf(op.Entry); kind == shim.Frontends && !exists {
			d[1] = recorded(k)
		}
		return d
	},
}

// Needs is what op depends on: it is not sent when the apply withheld one.
func Needs(op model.Op) Deps {
	if int(op.Kind) < len(needs) && needs[op.Kind] != nil {
		return needs[op.Kind](op)
	}
	return Deps{}
}

// Withheld is what op's failure withholds from the operations after it.
// exists says the kernel refused op because what it makes is there
// already (dataplane.ErrExist).
func Withheld(op model.Op, exists bool) Deps {
	if int(op.Kind) < len(withheld) && withheld[op.Kind] != nil {
		return withheld[op.Kind](op, exists)
	}
	return Deps{}
}

// Withholds is what an operation held back for want of d withholds in
// turn: a frontend without its record counts as not made, as if its
// create had failed.
func (d Dep) Withholds() Deps {
	if d.Kind == VSRecorded {
		return Withheld(model.Op{Kind: model.AddService, VS: model.VirtualServer{Key: d.VS}}, false)
	}
	return Deps{}
}
