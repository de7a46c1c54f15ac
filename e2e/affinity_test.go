package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Scenario 2: ClientIP session affinity keeps every connection of a client
// on one backend, and a short timeoutSeconds lets the client move once its
// persistence has expired.
func TestSessionAffinity(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "aff", 2, 3)
	svc := tcpService("aff", "10.96.2.1", bs)
	// IPVS keeps a persistence template while connections it placed are
	// alive, and one still controlling a connection when its timeout fires
	// is extended by a minute. The reset connections below live 10s in
	// IPVS, so a timeout above that expires on time.
	svc.affinity = 15 // seconds
	s.ready(t, svc, bs...)
	tab, err := readTable()
	if err != nil {
		t.Fatal(err)
	}
	if vs := tab[svc.vs()]; vs == nil || vs.flags != "persistent 15" {
		t.Fatalf("want a persistent virtual server with timeout 15, kernel has %s", tab.weights(svc.vs()))
	}

	// Connections close with a reset: IPVS then forgets them after 10s, and
	// the persistence template can only expire once they are gone.
	stick := func(src string) string {
		t.Helper()
		got := tally{}
		for i := 0; i < 20; i++ {
			name, err := s.client.askReset(src, svc.target(), 3*time.Second)
			if err != nil {
				t.Fatalf("connection %d from %s: %v", i+1, src, err)
			}
			got[name]++
		}
		t.Logf("20 connections from %s: %s", src, got)
		if len(got) != 1 {
			t.Fatalf("affinity broken: client %s reached %s", src, got)
		}
		for name := range got {
			return name
		}
		return ""
	}
	a, b := clientAddrs[0], clientAddrs[1]
	first := stick(a)
	stick(b)

	took, err := waitFor(45*time.Second, func() (bool, string) {
		left, err := connEntries(a, svc.target())
		if err != nil {
			return false, err.Error()
		}
		return len(left) == 0, fmt.Sprintf("entries from %s left: %q", a, left)
	})
	if err != nil {
		t.Fatalf("the persistence of %s never expired: %v", a, err)
	}
	t.Logf("%s's connection entries and persistence template expired %s after its last connection", a, took.Round(time.Millisecond))
	second := stick(a)
	t.Logf("before expiry %s was on %s, after it on %s", a, first, second)
	if second == first {
		t.Errorf("after the affinity expired %s is still on %s; rr should have moved it", a, first)
	}
}

// connEntries counts IPVS connection entries (templates included) from the
// client address src to the virtual address vip, from ipvsadm -Lnc.
func connEntries(src, vip string) ([]string, error) {
	out, err := run("ipvsadm", "-Lnc")
	if err != nil {
		return nil, err
	}
	var left []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && strings.HasPrefix(f[3], src+":") && f[4] == vip {
			left = append(left, strings.Join(f, " "))
		}
	}
	return left, nil
}
