package ipvsadm

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Names turns addresses and ports into names for listings without -n, as
// ipvsadm does with gethostbyaddr(3) and getservbyport(3). An empty result
// means "no name": the number is printed.
type Names interface {
	Host(addr netip.Addr) string
	Service(port uint16, proto model.Protocol) string
}

// NoNames resolves nothing; listings without -n then look like -n's.
type NoNames struct{}

func (NoNames) Host(netip.Addr) string                { return "" }
func (NoNames) Service(uint16, model.Protocol) string { return "" }

// SystemNames is the node's view: port names from a services(5) file (the
// first entry for a port and protocol wins, as getservbyport's linear scan
// of /etc/services does) and host names from Go's resolver, which reads
// /etc/hosts and then asks DNS like glibc's default "files dns". Lookups are
// cached: a listing asks for the same address many times.
//
// It is an approximation of glibc: a host with several names in /etc/hosts
// gets its first, and NSS modules other than files and dns are not asked.
type SystemNames struct {
	ServicesFile string        // default /etc/services
	Timeout      time.Duration // per host lookup; default 2s

	once     sync.Once
	services map[servKey]string
	mu       sync.Mutex
	hosts    map[netip.Addr]string
}

type servKey struct {
	port  uint16
	proto string
}

func (s *SystemNames) Service(port uint16, proto model.Protocol) string {
	s.once.Do(s.loadServices)
	name := protoName(proto)
	if name == "" {
		return ""
	}
	return s.services[servKey{port, name}]
}

func (s *SystemNames) loadServices() {
	path := s.ServicesFile
	if path == "" {
		path = "/etc/services"
	}
	f, err := os.Open(path)
	if err != nil {
		s.services = map[servKey]string{}
		return
	}
	defer f.Close()
	s.services = parseServices(f)
}

// parseServices reads "name port/proto [aliases] [# comment]" lines.
func parseServices(r io.Reader) map[servKey]string {
	m := map[servKey]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		portStr, proto, ok := strings.Cut(f[1], "/")
		if !ok {
			continue
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			continue
		}
		k := servKey{uint16(port), proto}
		if _, seen := m[k]; !seen {
			m[k] = f[0]
		}
	}
	return m
}

// protoName is the protocol as services(5) spells it.
func protoName(proto model.Protocol) string {
	if !balanced(proto) {
		return ""
	}
	return strings.ToLower(proto.String())
}

func (s *SystemNames) Host(addr netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := s.hosts[addr]; ok {
		return name
	}
	if s.hosts == nil {
		s.hosts = map[netip.Addr]string{}
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	name := ""
	if names, err := net.DefaultResolver.LookupAddr(ctx, addr.String()); err == nil && len(names) > 0 {
		name = strings.TrimSuffix(names[0], ".")
	}
	s.hosts[addr] = name
	return name
}
