package translate

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// TestEndpointMemoEqualsFromScratch translates random sequences of slice
// changes through one memo and checks every step against a translation
// from scratch: the same endpoints, and the same Result.
func TestEndpointMemoEqualsFromScratch(t *testing.T) {
	for seed := range uint64(300) {
		checkMemoSequence(t, seed, 30)
	}
}

// FuzzEndpointMemo is TestEndpointMemoEqualsFromScratch from any seed.
func FuzzEndpointMemo(f *testing.F) {
	f.Add(uint64(1), uint8(20))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		checkMemoSequence(t, seed, int(steps))
	})
}

// checkMemoSequence runs steps random changes from seed.
func checkMemoSequence(t *testing.T, seed uint64, steps int) {
	t.Helper()
	g := memoGen{r: rand.New(rand.NewPCG(seed, 7))}
	svc := g.service()
	node, cfg := testNode(), testConfig()
	var memo EndpointMemo
	var sl []*discoveryv1.EndpointSlice
	for range 1 + g.r.IntN(4) {
		sl = append(sl, g.slice())
	}
	for step := range steps {
		sl = g.change(sl)
		if g.r.IntN(10) == 0 {
			cfg = g.config(cfg)
		}
		if g.r.IntN(8) == 0 {
			svc = g.service()
		}
		want := collectEndpoints(sl, cfg)
		got := memo.collect(sl, cfg)
		if !sameIndex(got, want) {
			t.Fatalf("seed %d step %d: memo endpoints\n%v\nfrom scratch\n%v", seed, step, got, want)
		}
		gotRes := ServiceWith(svc, sl, node, cfg, &memo)
		wantRes := Service(svc, sl, node, cfg)
		if !reflect.DeepEqual(gotRes, wantRes) {
			t.Fatalf("seed %d step %d: memo result\n%s\nfrom scratch\n%s", seed, step, render(gotRes), render(wantRes))
		}
	}
}

// sameIndex compares two indexes, an empty list as none.
func sameIndex(a, b endpointIndex) bool {
	nonEmpty := func(x endpointIndex) int {
		n := 0
		for _, eps := range x {
			if len(eps) > 0 {
				n++
			}
		}
		return n
	}
	if nonEmpty(a) != nonEmpty(b) {
		return false
	}
	for k, eps := range b {
		if !reflect.DeepEqual(slices.Clip(a[k]), slices.Clip(eps)) && (len(eps) > 0 || len(a[k]) > 0) {
			return false
		}
	}
	return true
}

// memoGen makes random slices over few addresses, so that copies of one
// address in several slices (and in one) are common, with every kind of
// condition, node, hint, port and family.
type memoGen struct {
	r *rand.Rand
	n int
}

func (g *memoGen) pickS(ss ...string) string { return ss[g.r.IntN(len(ss))] }

func (g *memoGen) service() *corev1.Service {
	opts := []svcOpt{portsOpt(svcPort("http", corev1.ProtocolTCP, 80, 30080), svcPort("dns", corev1.ProtocolUDP, 53, 30053)),
		typeOpt(corev1.ServiceTypeNodePort), clusterIPsOpt("10.96.0.10", "fd00::10")}
	if g.r.IntN(3) == 0 {
		opts = append(opts, internalLocal)
	}
	if g.r.IntN(3) == 0 {
		opts = append(opts, externalLocal)
	}
	return service(opts...)
}

func (g *memoGen) config(cfg Config) Config {
	cfg.Families = model.Families{IPv4: g.r.IntN(4) > 0, IPv6: g.r.IntN(2) > 0}
	cfg.ServiceProxyName = g.pickS("", "", "other")
	return cfg
}

func (g *memoGen) slice() *discoveryv1.EndpointSlice {
	g.n++
	family, addr := discoveryv1.AddressTypeIPv4, func(i int) string { return fmt.Sprintf("10.0.0.%d", i) }
	if g.r.IntN(4) == 0 {
		family, addr = discoveryv1.AddressTypeIPv6, func(i int) string { return fmt.Sprintf("fd00:1::%d", i) }
	}
	ports := []discoveryv1.EndpointPort{sport("http", corev1.ProtocolTCP, 8080)}
	switch g.r.IntN(4) {
	case 0:
		ports = append(ports, sport("dns", corev1.ProtocolUDP, 5353))
	case 1:
		ports = []discoveryv1.EndpointPort{sport("dns", corev1.ProtocolUDP, 53), sport("http", corev1.ProtocolTCP, 8081)}
	case 2:
		ports = append(ports, sport("http", corev1.ProtocolTCP, 8082)) // one key twice
	}
	eps := make([]discoveryv1.Endpoint, g.r.IntN(12))
	for i := range eps {
		eps[i] = g.endpoint(addr(1 + g.r.IntN(16)))
	}
	s := slice(fmt.Sprintf("web-%d", g.n), family, ports, eps...)
	if g.r.IntN(20) == 0 {
		s.Labels[model.LabelServiceProxyName] = "other"
	}
	return s
}

func (g *memoGen) endpoint(addr string) discoveryv1.Endpoint {
	if g.r.IntN(30) == 0 {
		addr = "not-an-address"
	}
	opts := []epOpt{}
	if n := g.pickS("n1", "n2", "n3", ""); n != "" {
		opts = append(opts, onNode(n))
	}
	b := []*bool{nil, boolp(false), boolp(true)}
	opts = append(opts, cond(b[g.r.IntN(3)], b[g.r.IntN(3)], b[g.r.IntN(3)]))
	if g.r.IntN(3) == 0 {
		opts = append(opts, zoneHints(g.pickS("z1", "z2")))
	}
	if g.r.IntN(3) == 0 {
		opts = append(opts, nodeHints(g.pickS("n1", "n2")))
	}
	e := ep(addr, opts...)
	e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: fmt.Sprintf("pod-%d", g.r.IntN(1000))}
	return e
}

// change replaces, adds, removes, reorders or repeats slices.
func (g *memoGen) change(sl []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	sl = slices.Clone(sl)
	for range 1 + g.r.IntN(3) {
		switch op := g.r.IntN(10); {
		case op < 4 && len(sl) > 0:
			sl[g.r.IntN(len(sl))] = g.slice()
		case op < 6:
			sl = slices.Insert(sl, g.r.IntN(len(sl)+1), g.slice())
		case op < 8 && len(sl) > 0:
			i := g.r.IntN(len(sl))
			sl = slices.Delete(sl, i, i+1)
		case op == 8 && len(sl) > 1:
			g.r.Shuffle(len(sl), func(i, j int) { sl[i], sl[j] = sl[j], sl[i] })
		case op == 9 && len(sl) > 0:
			if g.r.IntN(2) == 0 {
				sl = append(sl, sl[g.r.IntN(len(sl))])
			} else {
				sl = append(sl, nil)
			}
		}
	}
	return sl
}
