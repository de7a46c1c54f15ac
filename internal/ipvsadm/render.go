package ipvsadm

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Format is how a listing is printed: ipvsadm's FMT_* flags.
type Format struct {
	Numeric        bool // -n
	Rule           bool // -S: the save format
	Stats          bool // --stats
	Rate           bool // --rate
	Thresholds     bool // --thresholds
	PersistentConn bool // --persistent-conn
	NoSort         bool // --nosort
	Exact          bool // --exact
	TunInfo        bool // --tun-info
}

// printer carries one rendering's format and name source.
type printer struct {
	b     strings.Builder
	f     Format
	names Names
}

func newPrinter(f Format, names Names) *printer {
	if names == nil || f.Numeric {
		names = NoNames{}
	}
	return &printer{f: f, names: names}
}

func (p *printer) printf(format string, args ...any) { fmt.Fprintf(&p.b, format, args...) }

// RenderAll is `ipvsadm -L` (or -S when f.Rule): the version header (not in
// the save format), the column titles and every service, sorted unless
// f.NoSort.
func RenderAll(f Format, l Listing, names Names) string {
	p := newPrinter(f, names)
	if !f.Rule {
		v := l.Info.Version
		p.printf("IP Virtual Server version %d.%d.%d (size=%d)\n",
			(v>>16)&0xff, (v>>8)&0xff, v&0xff, int32(l.Info.ConnTabSize))
	}
	svcs := append([]ipvstable.Service(nil), l.Services...)
	if !f.NoSort {
		msort(svcs, cmpServices)
	}
	p.title()
	for i := range svcs {
		p.service(&svcs[i])
	}
	return p.b.String()
}

// RenderService is `ipvsadm -L -t VIP:PORT`: titles and that one service,
// without the version header.
func RenderService(f Format, svc ipvstable.Service, names Names) string {
	p := newPrinter(f, names)
	p.title()
	p.service(&svc)
	return p.b.String()
}

// RenderTimeouts is `ipvsadm -L --timeout`.
func RenderTimeouts(t ipvstable.Timeouts) string {
	return fmt.Sprintf("Timeout (tcp tcpfin udp): %d %d %d\n",
		int32(t.TCP), int32(t.TCPFin), int32(t.UDP))
}

// RenderDaemons is `ipvsadm -L --daemon`: one line per running sync daemon.
func RenderDaemons(ds []ipvstable.Daemon) string {
	var b strings.Builder
	for _, d := range ds {
		var kind string
		switch {
		case d.State&1 != 0:
			kind = "master"
		case d.State&2 != 0:
			kind = "backup"
		default:
			continue
		}
		fmt.Fprintf(&b, "%s sync daemon (mcast=%s, syncid=%d", kind, d.MCastIfn, int32(d.SyncID))
		if d.SyncMaxLen != 0 {
			fmt.Fprintf(&b, ", maxlen=%d", d.SyncMaxLen)
		}
		if d.MCastGroup.IsValid() {
			fmt.Fprintf(&b, ", group=%s", ntop(d.MCastGroup))
		}
		if d.MCastPort != 0 {
			fmt.Fprintf(&b, ", port=%d", d.MCastPort)
		}
		if d.MCastTTL != 0 {
			fmt.Fprintf(&b, ", ttl=%d", d.MCastTTL)
		}
		b.WriteString(")\n")
	}
	return b.String()
}

// title is print_title.
func (p *printer) title() {
	const prot = "Prot LocalAddress:Port"
	const remote = "  -> RemoteAddress:Port\n"
	switch {
	case p.f.Stats:
		p.printf("%-33s %8s %8s %8s %8s %8s\n"+remote, prot,
			"Conns", "InPkts", "OutPkts", "InBytes", "OutBytes")
	case p.f.Rate:
		p.printf("%-33s %8s %8s %8s %8s %8s\n"+remote, prot,
			"CPS", "InPPS", "OutPPS", "InBPS", "OutBPS")
	case p.f.Thresholds:
		p.printf("%-33s %-10s %-10s %-10s %-10s\n"+remote, prot,
			"Uthreshold", "Lthreshold", "ActiveConn", "InActConn")
	case p.f.PersistentConn:
		p.printf("%-33s %-9s %-11s %-10s %-10s\n"+remote, prot,
			"Weight", "PersistConn", "ActiveConn", "InActConn")
	case p.f.TunInfo:
		p.printf("Prot LocalAddress:Port Scheduler Flags\n" +
			"  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn\n")
	case !p.f.Rule:
		p.printf("Prot LocalAddress:Port Scheduler Flags\n" +
			"  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	}
}

// service is print_service_entry: the service line, then its destinations.
func (p *printer) service(se *ipvstable.Service) {
	name := p.serviceName(se)
	switch {
	case p.f.Rule:
		p.serviceRule(se, name)
	case p.f.Stats:
		p.printf("%-33s", name)
		p.largenums(se.Stats.Conns, se.Stats.InPkts, se.Stats.OutPkts, se.Stats.InBytes, se.Stats.OutBytes)
	case p.f.Rate:
		p.printf("%-33s", name)
		p.largenums(se.Stats.CPS, se.Stats.InPPS, se.Stats.OutPPS, se.Stats.InBPS, se.Stats.OutBPS)
	default:
		p.serviceLine(se, name)
	}
	p.printf("\n")

	dests := append([]ipvstable.Dest(nil), se.Dests...)
	if !p.f.NoSort {
		msort(dests, cmpDests)
	}
	for i := range dests {
		p.dest(se, name, &dests[i])
	}
}

// serviceName is the service column: "TCP  10.0.0.1:80", "FWM  7 IPv6",
// or in the save format "-t 10.0.0.1:80", "-f 7 -6".
func (p *printer) serviceName(se *ipvstable.Service) string {
	if se.FWMark != 0 {
		mark := int32(se.FWMark) // printed with %d
		v6 := ""
		switch {
		case p.f.Rule && se.AF == ipvstable.AFInet6:
			v6 = " -6"
		case se.AF == ipvstable.AFInet6:
			v6 = " IPv6"
		}
		if p.f.Rule {
			return fmt.Sprintf("-f %d%s", mark, v6)
		}
		return fmt.Sprintf("FWM  %d%s", mark, v6)
	}
	vname := p.addrPort(se.AF, se.Addr, se.Port, se.Protocol)
	if p.f.Rule {
		return serviceOption(se.Protocol) + " " + vname
	}
	name := fmt.Sprintf("%-4s %s", protocolName(se.Protocol), vname)
	if se.AF != ipvstable.AFInet6 && len(name) > 33 {
		name = name[:33] // ipvsadm cuts IPv4 names to the column
	}
	return name
}

// serviceOption and protocolName are model's texts for the protocols IPVS
// balances; for any other, ipvsadm prints placeholders of its own.
func serviceOption(proto model.Protocol) string {
	if !balanced(proto) {
		return "--xxx-service"
	}
	return proto.Option()
}

func protocolName(proto model.Protocol) string {
	if !balanced(proto) {
		return "?"
	}
	return proto.String()
}

// balanced tells the protocols IPVS balances, the ones ipvsadm names.
func balanced(proto model.Protocol) bool {
	return proto == model.TCP || proto == model.UDP || proto == model.SCTP
}

// serviceRule is the -A line of the save format, model's rule syntax.
func (p *printer) serviceRule(se *ipvstable.Service, name string) {
	rule := model.ServiceRule{Scheduler: model.Scheduler(se.Scheduler), Flags: se.Flags, Timeout: se.Timeout, Mask: netmask(se), PE: se.PEName}
	p.printf("-A %s %s", name, rule)
}

// serviceLine is the service line of the default, --thresholds and
// --persistent-conn listings.
func (p *printer) serviceLine(se *ipvstable.Service, name string) {
	p.printf("%s %s", name, se.Scheduler)
	if se.Flags&(model.FlagSchedSH1|model.FlagSchedSH2|model.FlagSched3) != 0 {
		p.printf(" (%s)", se.Flags.SchedNames(model.Scheduler(se.Scheduler)))
	}
	if se.Flags&model.FlagPersistent != 0 {
		p.printf(" persistent %d", se.Timeout)
		if m := netmask(se); m != "" {
			p.printf(" mask %s", m)
		}
		if se.PEName != "" {
			p.printf(" pe %s", se.PEName)
		}
	}
	if se.Flags&model.FlagOnePacket != 0 {
		p.printf(" ops")
	}
}

// netmask prints a non-default persistence netmask: dotted for IPv4, a
// prefix length for IPv6; "" for the default.
func netmask(se *ipvstable.Service) string {
	switch se.AF {
	case ipvstable.AFInet:
		if se.Netmask != 0xffffffff {
			m := se.Netmask
			return fmt.Sprintf("%d.%d.%d.%d", m>>24, (m>>16)&0xff, (m>>8)&0xff, m&0xff)
		}
	case ipvstable.AFInet6:
		if se.Netmask != 128 {
			return fmt.Sprintf("%d", int32(se.Netmask))
		}
	}
	return ""
}

// dest prints one destination line in the chosen format.
func (p *printer) dest(se *ipvstable.Service, svcName string, e *ipvstable.Dest) {
	dname := p.addrPort(e.AF, e.Addr, e.Port, se.Protocol)
	if !p.f.Rule && e.AF != ipvstable.AFInet6 && len(dname) > 28 {
		dname = dname[:28]
	}
	st := destStats(e.Stats)
	switch {
	case p.f.Rule:
		p.destRule(svcName, dname, e)
	case p.f.Stats:
		p.printf("  -> %-28s", dname)
		p.largenums(st.Conns, st.InPkts, st.OutPkts, st.InBytes, st.OutBytes)
		p.printf("\n")
	case p.f.Rate:
		// the three first rates are printed plainly, never as K/M/G
		p.printf("  -> %-28s %8d %8d %8d", dname, st.CPS, st.InPPS, st.OutPPS)
		p.largenums(st.InBPS, st.OutBPS)
		p.printf("\n")
	case p.f.Thresholds:
		p.printf("  -> %-28s %-10d %-10d %-10d %-10d\n", dname,
			e.UThreshold, e.LThreshold, e.ActiveConns, e.InactConns)
	case p.f.PersistentConn:
		p.printf("  -> %-28s %-9d %-11d %-10d %-10d\n", dname,
			uint32(e.Weight), e.PersistConns, e.ActiveConns, e.InactConns)
	case p.f.TunInfo:
		p.printf("  -> %-28s %-7s %-13s %-6d %-10d %-10d\n", dname,
			fwdName(e.Forward), tunInfo(e), e.Weight, e.ActiveConns, e.InactConns)
	default:
		p.printf("  -> %-28s %-7s %-6d %-10d %-10d\n", dname,
			fwdName(e.Forward), e.Weight, e.ActiveConns, e.InactConns)
	}
}

// destStats reproduces a libipvs quirk: it parses a destination's STATS64
// with its 32-bit parser, so every counter but the byte counts is cut to
// its low 32 bits (services are parsed correctly).
func destStats(s ipvstable.Stats) ipvstable.Stats {
	lo := func(v uint64) uint64 { return v & 0xffffffff }
	s.Conns, s.InPkts, s.OutPkts = lo(s.Conns), lo(s.InPkts), lo(s.OutPkts)
	s.CPS, s.InPPS, s.OutPPS = lo(s.CPS), lo(s.InPPS), lo(s.OutPPS)
	s.InBPS, s.OutBPS = lo(s.InBPS), lo(s.OutBPS)
	return s
}

var (
	tunFlagText = [...]string{"-c", "+c", "r+c"}
	tunFlagOpts = [...]string{"--tun-nocsum", "--tun-csum", "--tun-remcsum"}
)

func tunFlag(list [3]string, f uint16) string {
	if int(f) < len(list) {
		return list[f]
	}
	return "?"
}

// destRule is the -a line of the save format: model's rule syntax, then
// the tunnel's options.
func (p *printer) destRule(svcName, dname string, e *ipvstable.Dest) {
	p.printf("-a %s %s", svcName, model.RealRule{Addr: dname, Forward: e.Forward, Weight: int(e.Weight)})
	if e.Forward == model.Tunnel {
		switch e.TunType {
		case ipvstable.TunGRE:
			p.printf(" --tun-type gre %s", tunFlag(tunFlagOpts, e.TunFlags))
		case ipvstable.TunGUE:
			p.printf(" --tun-type gue --tun-port %d %s", e.TunPort, tunFlag(tunFlagOpts, e.TunFlags))
		case ipvstable.TunIPIP:
			p.printf(" --tun-type ipip")
		}
	}
	p.printf("\n")
}

func fwdName(f model.Forwarding) string {
	switch f {
	case model.Masq:
		return "Masq"
	case model.Local:
		return "Local"
	case model.Tunnel:
		return "Tunnel"
	case model.Route:
		return "Route"
	}
	return fwdUnknown
}

// tunInfo is the TunnelInfo column ("n/a" unless tunnelling).
func tunInfo(e *ipvstable.Dest) string {
	if e.Forward != model.Tunnel {
		return "n/a"
	}
	var s string
	switch e.TunType {
	case ipvstable.TunIPIP:
		s = "ipip"
	case ipvstable.TunGUE:
		s = fmt.Sprintf("gue:%d:%s", e.TunPort, tunFlag(tunFlagText, e.TunFlags))
	case ipvstable.TunGRE:
		s = "gre:" + tunFlag(tunFlagText, e.TunFlags)
	default:
		return "n/a"
	}
	if len(s) > 15 { // ipvsadm's 16-byte buffer
		s = s[:15]
	}
	return s
}

// largenums prints counters in 9 columns: plain below 100 million, then
// scaled to K, M, G or T; --exact prints them whole and widens as needed.
func (p *printer) largenums(vs ...uint64) {
	for _, v := range vs {
		p.b.WriteString(largenum(v, p.f.Exact))
	}
}

func largenum(i uint64, exact bool) string {
	if exact {
		s := strconv.FormatUint(i, 10)
		width := 9
		if len(s) > 8 {
			width = len(s) + 1
		}
		return fmt.Sprintf("%*s", width, s)
	}
	switch {
	case i < 100_000_000:
		return fmt.Sprintf("%9d", i)
	case i < 1_000_000_000:
		return fmt.Sprintf("%8dK", i/1000)
	case i < 100_000_000_000:
		return fmt.Sprintf("%8dM", i/1_000_000)
	case i < 100_000_000_000_000:
		return fmt.Sprintf("%8dG", i/1_000_000_000)
	}
	return fmt.Sprintf("%8dT", i/1_000_000_000_000)
}

// addrPort is addrport_to_anyname: "10.0.0.1:80", "[fd00::1]:53", or with
// names "web.example:http"; IPv6 keeps its brackets even around a name.
// ipvsadm builds it in a 60-byte buffer, so it is cut at 59 bytes.
func (p *printer) addrPort(af uint16, addr netip.Addr, port uint16, proto model.Protocol) string {
	host := ""
	if !p.f.Numeric {
		host = p.names.Host(addr)
	}
	if host == "" {
		host = ntop(addr)
	}
	portName := ""
	if !p.f.Numeric {
		portName = p.names.Service(port, proto)
	}
	if portName == "" {
		portName = strconv.Itoa(int(port))
	}
	var s string
	if af == ipvstable.AFInet {
		s = host + ":" + portName
	} else {
		s = "[" + host + "]:" + portName
	}
	if len(s) > 59 {
		s = s[:59]
	}
	return s
}

// ntop is inet_ntop(3). It differs from netip's String for IPv4-compatible
// IPv6 addresses (::a.b.c.d), which glibc prints with a dotted tail.
func ntop(a netip.Addr) string {
	if !a.IsValid() {
		return "0.0.0.0"
	}
	if a.Is4() {
		return a.String()
	}
	b := a.As16()
	zero12 := true
	for _, x := range b[:12] {
		if x != 0 {
			zero12 = false
			break
		}
	}
	if zero12 && (b[12] != 0 || b[13] != 0) {
		return fmt.Sprintf("::%d.%d.%d.%d", b[12], b[13], b[14], b[15])
	}
	return a.String()
}
