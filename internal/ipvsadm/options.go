package ipvsadm

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Command is what a command line asks for.
type Command int

const (
	CmdList Command = iota + 1
	CmdSave
	CmdHelp
	CmdVersion
	// CmdMutate is any command that would change the kernel (-A, -E, -D,
	// -C, -R, -a, -e, -d, -Z, --set, --start-daemon, --stop-daemon). We
	// never run it: the agent owns the table.
	CmdMutate
)

// Options is a parsed ipvsadm command line.
type Options struct {
	Command Command
	Mutate  string // the mutating option as given, for CmdMutate
	Format  Format

	Connection bool // -c
	Timeout    bool // --timeout
	Daemon     bool // --daemon
	// Service selects one virtual service (-t, -u, --sctp-service, -f).
	Service *Selector
}

// Selector names one virtual service as ipvsadm's -t/-u/--sctp-service/-f do.
type Selector struct {
	AF       uint16
	Protocol model.Protocol
	Addr     netip.Addr
	Port     uint16
	FWMark   uint32
}

// Matches tells whether s is the selected service (the kernel's lookup:
// by mark and family, or by protocol, address and port).
func (sel Selector) Matches(s ipvstable.Service) bool {
	if sel.FWMark != 0 {
		return s.FWMark == sel.FWMark && s.AF == sel.AF
	}
	return s.FWMark == 0 && s.AF == sel.AF && s.Protocol == sel.Protocol &&
		s.Addr == sel.Addr && s.Port == sel.Port
}

// UsageError is a command line ipvsadm rejects: Msg goes to stderr as is
// and the process exits with Code (ipvsadm uses 2, and 255 for popt's
// errors).
type UsageError struct {
	Msg  string
	Code int
}

func (e *UsageError) Error() string { return e.Msg }

func usageErr(code int, format string, args ...any) *UsageError {
	return &UsageError{Msg: fmt.Sprintf(format, args...), Code: code}
}

// option bits, in ipvsadm's order: its messages name the options by these
// names and check conflicts in this order.
const (
	optNumeric = iota
	optConnection
	optService
	optScheduler
	optPersistent
	optNetmask
	optServer
	optForward
	optWeight
	optUThreshold
	optLThreshold
	optMcast
	optTimeout
	optDaemon
	optStats
	optRate
	optThresholds
	optPersistentConn
	optNoSort
	optSyncID
	optExact
	optOnePacket
	optPE
	optSchedFlags
	optMcastGroup
	optMcastPort
	optMcastTTL
	optSyncMaxLen
	optTunInfo
	optTunType
	optTunPort
	optTunNoCsum
	optTunCsum
	optTunRemCsum
	numOpts
)

var optNames = [numOpts]string{
	"numeric", "connection", "service-address", "scheduler", "persistent",
	"netmask", "real-server", "forwarding-method", "weight", "u-threshold",
	"l-threshold", "mcast-interface", "timeout", "daemon", "stats", "rate",
	"thresholds", "persistent-conn", "nosort", "syncid", "exact", "ops", "pe",
	"sched-flags", "mcast-group", "mcast-port", "mcast-ttl", "sync-maxlen",
	"tun-info", "tun-type", "tun-port", "tun-nocsum", "tun-csum", "tun-remcsum",
}

// legal options of the two commands we run: ' ' optional, 'x' illegal,
// '1' at most one of them (ipvsadm's commands_v_options rows).
var (
	listLegal = [numOpts]byte{
		' ', '1', '1', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', '1', '1', ' ', ' ', ' ',
		' ', ' ', ' ', ' ', 'x', 'x', 'x', 'x', 'x', 'x', 'x', ' ', 'x', 'x', 'x', 'x', 'x',
	}
	saveLegal = [numOpts]byte{
		' ', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x',
		'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x',
	}
)

// optSpec is one entry of ipvsadm's option table.
type optSpec struct {
	long  string
	short byte
	arg   bool   // takes a value
	cmd   string // non-empty for a command
	opt   int    // option bit, -1 for none
}

var optTable = []optSpec{
	{"add-service", 'A', false, "mutate", -1},
	{"edit-service", 'E', false, "mutate", -1},
	{"delete-service", 'D', false, "mutate", -1},
	{"clear", 'C', false, "mutate", -1},
	{"list", 'L', false, "list", -1},
	{"list", 'l', false, "list", -1},
	{"zero", 'Z', false, "mutate", -1},
	{"add-server", 'a', false, "mutate", -1},
	{"edit-server", 'e', false, "mutate", -1},
	{"delete-server", 'd', false, "mutate", -1},
	{"set", 0, false, "mutate", -1},
	{"help", 'h', false, "help", -1},
	{"version", 'v', false, "version", -1},
	{"restore", 'R', false, "mutate", -1},
	{"save", 'S', false, "save", -1},
	{"start-daemon", 0, true, "mutate", -1},
	{"stop-daemon", 0, true, "mutate", -1},
	{"tcp-service", 't', true, "", optService},
	{"udp-service", 'u', true, "", optService},
	{"sctp-service", 0, true, "", optService},
	{"fwmark-service", 'f', true, "", optService},
	{"scheduler", 's', true, "", optScheduler},
	{"persistent", 'p', false, "", optPersistent},
	{"netmask", 'M', true, "", optNetmask},
	{"real-server", 'r', true, "", optServer},
	{"masquerading", 'm', false, "", optForward},
	{"ipip", 'i', false, "", optForward},
	{"gatewaying", 'g', false, "", optForward},
	{"weight", 'w', true, "", optWeight},
	{"u-threshold", 'x', true, "", optUThreshold},
	{"l-threshold", 'y', true, "", optLThreshold},
	{"numeric", 'n', false, "", optNumeric},
	{"connection", 'c', false, "", optConnection},
	{"mcast-interface", 0, true, "", optMcast},
	{"syncid", 0, true, "", optSyncID},
	{"timeout", 0, false, "", optTimeout},
	{"daemon", 0, false, "", optDaemon},
	{"stats", 0, false, "", optStats},
	{"rate", 0, false, "", optRate},
	{"thresholds", 0, false, "", optThresholds},
	{"persistent-conn", 0, false, "", optPersistentConn},
	{"nosort", 0, false, "", optNoSort},
	{"sort", 0, false, "", -1},
	{"exact", 'X', false, "", optExact},
	{"ipv6", '6', false, "", -1},
	{"ops", 'o', false, "", optOnePacket},
	{"pe", 0, true, "", optPE},
	{"sched-flags", 'b', true, "", optSchedFlags},
	{"mcast-group", 0, true, "", optMcastGroup},
	{"mcast-port", 0, true, "", optMcastPort},
	{"mcast-ttl", 0, true, "", optMcastTTL},
	{"sync-maxlen", 0, true, "", optSyncMaxLen},
	{"tun-info", 0, false, "", optTunInfo},
	{"tun-type", 0, true, "", optTunType},
	{"tun-port", 0, true, "", optTunPort},
	{"tun-nocsum", 0, false, "", optTunNoCsum},
	{"tun-csum", 0, false, "", optTunCsum},
	{"tun-remcsum", 0, false, "", optTunRemCsum},
}

// token is one option found on the command line, with its value.
type token struct {
	spec  *optSpec
	name  string // as written, for messages
	value string
}

// Parse reads ipvsadm's command line (without the program name). Like
// ipvsadm (popt), the first option must be the command; short options may
// be grouped ("-Ln") and take their value attached or as the next word;
// long options take "--name=value" or "--name value".
func Parse(prog string, args []string) (Options, error) {
	toks, rest, err := tokenize(args)
	if err != nil {
		return Options{}, err
	}
	if len(toks) == 0 || toks[0].spec.cmd == "" {
		return Options{}, tryHelp(prog)
	}
	o := Options{}
	switch first := toks[0]; first.spec.cmd {
	case "list":
		o.Command = CmdList
	case "save":
		o.Command = CmdSave
	case "help":
		return Options{Command: CmdHelp}, nil
	case "version":
		return Options{Command: CmdVersion}, nil
	default:
		return Options{Command: CmdMutate, Mutate: first.name}, nil
	}
	var seen [numOpts]bool
	for _, t := range toks[1:] {
		if t.spec.cmd != "" {
			if t.spec.cmd == "mutate" {
				return Options{Command: CmdMutate, Mutate: t.name}, nil
			}
			return Options{}, usageErr(2, "multiple commands specified")
		}
		if err := o.apply(t, &seen); err != nil {
			return Options{}, err
		}
	}
	if len(rest) > 0 {
		return Options{}, usageErr(2, "unexpected argument %s", rest[0])
	}
	legal := &listLegal
	cmdName := "list"
	if o.Command == CmdSave {
		legal, cmdName = &saveLegal, "save"
	}
	if err := checkLegal(legal, cmdName, seen); err != nil {
		return Options{}, err
	}
	f := o.Format
	if (o.Connection || o.Timeout || o.Daemon) && (f.Stats || f.Rate || f.Thresholds) ||
		(o.Timeout || o.Daemon) && f.PersistentConn {
		return Options{}, usageErr(2, "options conflicts in the list command")
	}
	if o.Command == CmdSave {
		o.Format.Rule = true
	}
	return o, nil
}

func tryHelp(prog string) error {
	return usageErr(255, "Try `%s -h' or '%s --help' for more information.", prog, prog)
}

// tokenize splits args into options and leftover arguments, popt style.
func tokenize(args []string) ([]token, []string, error) {
	var toks []token
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			rest = append(rest, args[i+1:]...)
			return toks, rest, nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			spec := findLong(name)
			if spec == nil {
				return nil, nil, usageErr(255, "%s: unknown option", a)
			}
			t := token{spec: spec, name: "--" + name}
			if spec.arg {
				if !hasVal {
					if i+1 >= len(args) {
						return nil, nil, usageErr(255, "%s: missing argument", a)
					}
					i++
					val = args[i]
				}
				t.value = val
			}
			toks = append(toks, t)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j := 1; j < len(a); j++ {
				spec := findShort(a[j])
				if spec == nil {
					return nil, nil, usageErr(255, "-%c: unknown option", a[j])
				}
				t := token{spec: spec, name: "-" + string(a[j])}
				if spec.arg {
					if j+1 < len(a) {
						t.value = a[j+1:]
					} else if i+1 < len(args) {
						i++
						t.value = args[i]
					} else {
						return nil, nil, usageErr(255, "-%c: missing argument", a[j])
					}
					toks = append(toks, t)
					break
				}
				toks = append(toks, t)
			}
		default:
			rest = append(rest, a)
		}
	}
	return toks, rest, nil
}

func findLong(name string) *optSpec {
	for i := range optTable {
		if optTable[i].long == name {
			return &optTable[i]
		}
	}
	return nil
}

func findShort(c byte) *optSpec {
	for i := range optTable {
		if optTable[i].short == c {
			return &optTable[i]
		}
	}
	return nil
}

// apply records one option, failing as ipvsadm does on a repeated option
// or a bad value.
func (o *Options) apply(t token, seen *[numOpts]bool) error {
	if t.spec.long == "ipv6" {
		if o.Service == nil || o.Service.FWMark == 0 {
			return usageErr(2, "-6 used before -f\n")
		}
		o.Service.AF = ipvstable.AFInet6
		return nil
	}
	if t.spec.opt < 0 {
		return nil // --sort: the default, accepted for compatibility
	}
	if seen[t.spec.opt] {
		return usageErr(2, "multiple '%s' options specified", optNames[t.spec.opt])
	}
	seen[t.spec.opt] = true
	f := &o.Format
	switch t.spec.opt {
	case optService:
		sel, err := parseSelector(t.spec.long, t.value)
		if err != nil {
			return err
		}
		o.Service = sel
	case optNumeric:
		f.Numeric = true
	case optConnection:
		o.Connection = true
	case optTimeout:
		o.Timeout = true
	case optDaemon:
		o.Daemon = true
	case optStats:
		f.Stats = true
	case optRate:
		f.Rate = true
	case optThresholds:
		f.Thresholds = true
	case optPersistentConn:
		f.PersistentConn = true
	case optNoSort:
		f.NoSort = true
	case optExact:
		f.Exact = true
	case optTunInfo:
		f.TunInfo = true
	}
	return nil
}

// checkLegal applies one row of ipvsadm's command/option table.
func checkLegal(legal *[numOpts]byte, cmd string, seen [numOpts]bool) error {
	last := -1
	for j := 0; j < numOpts; j++ {
		if !seen[j] {
			continue
		}
		switch legal[j] {
		case 'x':
			return usageErr(2, "Illegal '%s' option with the '%s' command", optNames[j], cmd)
		case '1':
			if last >= 0 {
				return usageErr(2, "The option '%s' conflicts with the '%s' option in the '%s' command",
					optNames[j], optNames[last], cmd)
			}
			last = j
		}
	}
	return nil
}

// parseSelector reads a service option's value: "host[:port]",
// "[v6addr]:port" or a bare IPv6 address, or a mark for -f.
func parseSelector(long, v string) (*Selector, error) {
	if long == "fwmark-service" {
		mark, err := strconv.ParseUint(v, 10, 32)
		if err != nil || mark == 0 {
			return nil, usageErr(2, "invalid fwmark value `%s' specified", v)
		}
		return &Selector{AF: ipvstable.AFInet, Protocol: model.TCP, FWMark: uint32(mark)}, nil
	}
	proto := map[string]model.Protocol{"tcp-service": model.TCP, "udp-service": model.UDP, "sctp-service": model.SCTP}[long]
	bad := usageErr(2, "illegal virtual server address[:port] specified")
	if v == "" || isDigits(v) {
		return nil, bad
	}
	host, port, hasPort := v, "", false
	if strings.HasPrefix(v, "[") {
		end := strings.IndexByte(v, ']')
		if end < 0 || !strings.HasPrefix(v[end+1:], ":") {
			return nil, bad
		}
		host, port, hasPort = v[1:end], v[end+2:], true
	}
	sel := &Selector{Protocol: proto}
	candidate := v
	if hasPort {
		candidate = host
	}
	if a, err := netip.ParseAddr(candidate); err == nil && a.Is6() && a.Zone() == "" {
		sel.AF, sel.Addr = ipvstable.AFInet6, a
	} else {
		if hasPort { // "[x]:port" where x is no IPv6 address
			return nil, bad
		}
		if i := strings.LastIndexByte(v, ':'); i >= 0 {
			host, port, hasPort = v[:i], v[i+1:], true
		}
		a, ok := resolve4(host)
		if !ok {
			return nil, bad
		}
		sel.AF, sel.Addr = ipvstable.AFInet, a
	}
	if hasPort {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			n, lerr := net.LookupPort(protoName(proto), port)
			if lerr != nil || port == "" {
				return nil, bad
			}
			p = uint64(n)
		}
		sel.Port = uint16(p)
	}
	return sel, nil
}

// resolve4 is inet_aton, then a host name lookup (IPv4 only, as ipvsadm).
func resolve4(host string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), a.Unmap().Is4()
	}
	if host == "" {
		return netip.Addr{}, false
	}
	addrs, err := net.LookupIP(host)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, ip := range addrs {
		if ip4 := ip.To4(); ip4 != nil {
			return netip.AddrFrom4([4]byte(ip4)), true
		}
	}
	return netip.Addr{}, false
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
