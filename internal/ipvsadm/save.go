package ipvsadm

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// ParseSave reads a table saved in ipvsadm's save format (`ipvsadm -Sn`,
// ipvsadm-save, or `kube-ipvs ipvsadm -Sn`): one -A line per virtual
// service, one -a line per real server, as RenderAll writes them with
// Format.Rule. It is the inverse of that rendering as far as the model
// holds a table: the persistence netmask, the persistence engine, the
// thresholds and the tunnel options are read and dropped. Names in place of
// numbers (a save without -n) are refused: resolving them here would plan
// against whatever they resolve to on another machine. The state returned
// holds only Services.
func ParseSave(data []byte) (model.State, error) {
	st := model.NewState()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := saveLine(st, strings.Fields(line)); err != nil {
			return model.State{}, fmt.Errorf("line %d: %q: %w", n, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return model.State{}, fmt.Errorf("read the saved table: %w", err)
	}
	return st, nil
}

// saveLine adds one -A or -a line to st.
func saveLine(st model.State, f []string) error {
	cmd, rest := f[0], f[1:]
	key, rest, err := saveKey(rest)
	if err != nil {
		return err
	}
	switch cmd {
	case "-A", "--add-service":
		if _, dup := st.Services[key]; dup {
			return fmt.Errorf("service %s listed twice", key)
		}
		vs, err := saveService(key, rest)
		if err != nil {
			return err
		}
		st.Services[key] = &model.Service{VirtualServer: vs}
	case "-a", "--add-server":
		svc, ok := st.Services[key]
		if !ok {
			return fmt.Errorf("real server of %s before its -A line", key)
		}
		rs, err := saveReal(rest)
		if err != nil {
			return err
		}
		if svc.Reals.Has(rs.Addr) {
			return fmt.Errorf("real server %s listed twice", rs.Addr)
		}
		svc.Reals.Set(rs)
	default:
		return fmt.Errorf("want -A or -a, got %q", cmd)
	}
	return nil
}

// saveKey reads the service's name: "-t ADDR:PORT", "-u ...",
// "--sctp-service ...", or "-f MARK [-6]".
func saveKey(f []string) (model.VSKey, []string, error) {
	if len(f) < 2 {
		return model.VSKey{}, nil, fmt.Errorf("no service named")
	}
	switch f[0] {
	case "-f", "--fwmark-service":
		mark, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil || mark == 0 {
			return model.VSKey{}, nil, fmt.Errorf("firewall mark %q: want a number from 1", f[1])
		}
		k := model.VSKey{FWMark: uint32(mark), Addr: netip.IPv4Unspecified()}
		rest := f[2:]
		if len(rest) > 0 && rest[0] == "-6" {
			k.Addr, rest = netip.IPv6Unspecified(), rest[1:]
		}
		return k, rest, nil
	}
	proto, ok := map[string]model.Protocol{
		"-t": model.TCP, "--tcp-service": model.TCP,
		"-u": model.UDP, "--udp-service": model.UDP,
		"--sctp-service": model.SCTP,
	}[f[0]]
	if !ok {
		return model.VSKey{}, nil, fmt.Errorf("want -t, -u, --sctp-service or -f, got %q", f[0])
	}
	ap, err := netip.ParseAddrPort(f[1])
	if err != nil {
		return model.VSKey{}, nil, fmt.Errorf("service address %q: want IP:PORT or [IPv6]:PORT in numbers (ipvsadm -Sn)", f[1])
	}
	return model.NewVSKey(proto, ap.Addr(), ap.Port()), f[2:], nil
}

// saveService reads an -A line's options.
func saveService(key model.VSKey, f []string) (model.VirtualServer, error) {
	vs := model.VirtualServer{Key: key}
	for i := 0; i < len(f); i++ {
		opt := f[i]
		switch opt {
		case "-o", "--ops":
			vs.Flags |= model.FlagOnePacket
			continue
		case "-p", "--persistent":
			vs.Flags |= model.FlagPersistent
			vs.Timeout = 300 // ipvsadm's default; the save format always names it
			if i+1 < len(f) && !strings.HasPrefix(f[i+1], "-") {
				t, err := strconv.ParseUint(f[i+1], 10, 32)
				if err != nil {
					return vs, fmt.Errorf("-p %q: want seconds", f[i+1])
				}
				vs.Timeout, i = uint32(t), i+1
			}
			continue
		}
		if i+1 >= len(f) {
			return vs, fmt.Errorf("%s needs a value", opt)
		}
		val := f[i+1]
		i++
		switch opt {
		case "-s", "--scheduler":
			vs.Scheduler = model.Scheduler(val)
		case "-b", "--sched-flags":
			flags, err := schedFlags(val)
			if err != nil {
				return vs, err
			}
			vs.Flags |= flags
		case "-M", "--netmask", "--pe":
			// the model does not hold them; the agent sets neither
		default:
			return vs, fmt.Errorf("unknown service option %q", opt)
		}
	}
	if vs.Scheduler == "" {
		vs.Scheduler = model.SchedRR // ipvsadm's default
	}
	return vs, nil
}

// schedFlags reads -b's names, as Flags.SchedNames writes them.
func schedFlags(names string) (model.Flags, error) {
	var f model.Flags
	for _, n := range strings.Split(names, ",") {
		switch {
		case n == "flag-1" || strings.HasSuffix(n, "-fallback"):
			f |= model.FlagSchedSH1
		case n == "flag-2" || strings.HasSuffix(n, "-port"):
			f |= model.FlagSchedSH2
		case n == "flag-3":
			f |= model.FlagSched3
		default:
			return 0, fmt.Errorf("unknown scheduler flag %q", n)
		}
	}
	return f, nil
}

// saveReal reads an -a line's options.
func saveReal(f []string) (model.RealServer, error) {
	rs := model.RealServer{Weight: 1, Forward: model.Route} // ipvsadm's defaults
	seen := false
	for i := 0; i < len(f); i++ {
		opt := f[i]
		if fwd, ok := map[string]model.Forwarding{"-m": model.Masq, "--masquerading": model.Masq,
			"-g": model.Route, "--gatewaying": model.Route, "-i": model.Tunnel, "--ipip": model.Tunnel}[opt]; ok {
			rs.Forward = fwd
			continue
		}
		if strings.HasPrefix(opt, "--tun-") && !strings.HasSuffix(opt, "-type") && !strings.HasSuffix(opt, "-port") {
			continue // --tun-nocsum, --tun-csum, --tun-remcsum
		}
		if i+1 >= len(f) {
			return rs, fmt.Errorf("%s needs a value", opt)
		}
		val := f[i+1]
		i++
		switch opt {
		case "-r", "--real-server":
			ap, err := netip.ParseAddrPort(val)
			if err != nil {
				return rs, fmt.Errorf("real server %q: want IP:PORT or [IPv6]:PORT in numbers (ipvsadm -Sn)", val)
			}
			rs.Addr, seen = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
		case "-w", "--weight":
			w, err := strconv.ParseInt(val, 10, 32)
			if err != nil || w < 0 {
				return rs, fmt.Errorf("-w %q: want a weight from 0", val)
			}
			rs.Weight = int(w)
		case "-x", "--u-threshold", "-y", "--l-threshold", "--tun-type", "--tun-port":
			// the model does not hold them; the agent sets none
		default:
			return rs, fmt.Errorf("unknown real server option %q", opt)
		}
	}
	if !seen {
		return rs, fmt.Errorf("no -r: which real server?")
	}
	return rs, nil
}
