package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// vipsSet is the agent's set of the IPv4 addresses it binds.
const vipsSet = "KUBE-IPVS-VIPS"

// Scenario: the VIPs set cannot take a member. Bound without its VIPs
// member, a VIP would answer on every port a host socket listens on; the
// agent holds the bind until the member is in, says which set is full,
// and replaces a set with less room than its own (an older version's)
// without a moment at which the set holds fewer members.
func TestVIPsSetFull(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "vipset", 12, 1)
	first := tcpService("vipset-a", "10.96.12.1", bs)
	s.ready(t, first, bs...)

	t.Run("a full set holds the bind", func(t *testing.T) {
		n := len(vipsMembers(t))
		shrinkVIPs(t, n)
		mark := s.agent.mark()
		second := tcpService("vipset-b", "10.96.12.2", bs)
		s.cleanupService(t, second)
		s.put(t, second)
		e, err := s.agent.waitLog(mark, settle, func(e logEntry) bool {
			return strings.Contains(e.str("err"), vipsSet+" "+second.vip) && strings.Contains(e.str("err"), "hash is full")
		})
		if err != nil {
			t.Fatalf("no log entry names the full set: %v", err)
		}
		t.Logf("the agent said: %s: %s", e.msg(), e.str("err"))
		// Until the next full sync replaces the set, the VIP stays unbound:
		// at no sample may it be bound without its member.
		var samples, held int
		took, err := waitFor(settle, func() (bool, string) {
			bound, _ := vipBound(second.vip)
			member := vipsHas(t, second.vip)
			samples++
			if !member {
				held++
			}
			if bound && !member {
				t.Fatalf("%s bound while %s lacks it", second.vip, vipsSet)
			}
			return bound && member, fmt.Sprintf("bound %v, member %v", bound, member)
		})
		if err != nil {
			t.Fatalf("%s never went in: %v", second.vip, err)
		}
		t.Logf("%s held unbound for %d of %d samples, bound with its member %s after the log entry", second.vip, held, samples, took.Round(time.Millisecond))
		if got := vipsMaxElem(t); got != 1<<20 {
			t.Fatalf("%s has maxelem %d after the full sync, want %d", vipsSet, got, 1<<20)
		}
	})

	t.Run("a small set is replaced at start without a window", func(t *testing.T) {
		if err := s.agent.stop(); err != nil {
			t.Fatal(err)
		}
		members := vipsMembers(t)
		shrinkVIPs(t, len(members))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var reads int
		var bad []string
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				out, err := run("ipset", "list", "-t", vipsSet)
				reads++
				if got := entriesOf(out); err != nil || got < len(members) {
					bad = append(bad, fmt.Sprintf("%d entries (%v)", got, err))
				}
			}
		}()
		err := s.startAgent()
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d listings of %s while the agent started", reads, vipsSet)
		if len(bad) > 0 {
			t.Fatalf("%d listings saw fewer than %d members, first: %s", len(bad), len(members), bad[0])
		}
		if got := vipsMaxElem(t); got != 1<<20 {
			t.Fatalf("%s has maxelem %d after the start, want %d", vipsSet, got, 1<<20)
		}
		for _, m := range members {
			if !vipsHas(t, m) {
				t.Fatalf("%s lost %s", vipsSet, m)
			}
		}
		if _, err := s.agent.waitLog(0, settle, func(e logEntry) bool { return e.msg() == "replacing ipset" && e.str("set") == vipsSet }); err != nil {
			t.Fatalf("the agent did not say it replaced %s: %v", vipsSet, err)
		}
	})
}

// vipsMembers lists the VIPs set's members.
func vipsMembers(t *testing.T) []string {
	t.Helper()
	out, err := run("ipset", "list", vipsSet)
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(out, "Members:\n")
	if !ok {
		t.Fatalf("no members in:\n%s", out)
	}
	return strings.Fields(list)
}

func vipsHas(t *testing.T, addr string) bool {
	t.Helper()
	for _, m := range vipsMembers(t) {
		if m == addr {
			return true
		}
	}
	return false
}

var (
	maxElemRE = regexp.MustCompile(`maxelem (\d+)`)
	entriesRE = regexp.MustCompile(`Number of entries: (\d+)`)
)

func vipsMaxElem(t *testing.T) int {
	t.Helper()
	out, err := run("ipset", "list", "-t", vipsSet)
	if err != nil {
		t.Fatal(err)
	}
	m := maxElemRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no maxelem in:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// entriesOf reads the member count of an `ipset list -t` (-1: none).
func entriesOf(out string) int {
	m := entriesRE.FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// shrinkVIPs swaps in, behind the agent's back, a VIPs set holding the
// members there are and room for n: as an older version made it, full
// once n members are in.
//
// The agent repairs a set someone else replaced as soon as a rescan reads
// it, and its start's own rule writes are announced and read back shortly
// after it: a shrink that such a read repaired at once is made again, a
// few times, until it holds.
func shrinkVIPs(t *testing.T, n int) {
	t.Helper()
	const tmp = "e2e-vips-small"
	got := 0
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		members := vipsMembers(t)
		steps := [][]string{{"create", tmp, "hash:ip", "family", "inet", "maxelem", strconv.Itoa(n)}}
		for _, m := range members {
			steps = append(steps, []string{"add", tmp, m})
		}
		steps = append(steps, []string{"swap", tmp, vipsSet}, []string{"destroy", tmp})
		for _, args := range steps {
			if _, err := run("ipset", args...); err != nil {
				t.Fatal(err)
			}
		}
		if got = vipsMaxElem(t); got == n {
			return
		}
	}
	t.Fatalf("%s has maxelem %d, want %d", vipsSet, got, n)
}
