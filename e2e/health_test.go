package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// Scenario: one tenant's Service never changes the node's health. Two
// Services asking for a scheduler this kernel has no module for (Debian's
// cloud kernel 6.1 has no ip_vs_twos), and a Service with an IPv6 external
// IP on a node that disabled IPv6 (net.ipv6.conf.all/default.disable_ipv6=1),
// each leave every sync green, /healthz 200 and the other Services served,
// and make no sync re-read the whole kernel.
func TestTenantCannotFlipHealth(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "tenant", 9, 2)
	live := tcpService("tenant-live", "10.96.9.1", bs[:1])
	s.ready(t, live, bs[0])

	// quiet checks that, since mark, no sync failed and none was full,
	// that /healthz answers 200 and that the live Service answers.
	quiet := func(t *testing.T, mark int) {
		t.Helper()
		for _, e := range s.agent.since(mark) {
			if e.msg() == "sync failed" || isFullSync(e) {
				t.Errorf("agent: %s", e)
			}
		}
		if code, err := healthz(); err != nil || code != http.StatusOK {
			t.Errorf("/healthz: %d, %v; want 200", code, err)
		}
		if name, err := s.client.ask("", live.target(), 3*time.Second); err != nil || name != bs[0].name {
			t.Errorf("%s answered by %q, %v; want %s", live.target(), name, err, bs[0].name)
		}
	}

	t.Run("missing scheduler", func(t *testing.T) {
		if _, err := os.Stat("/sys/module/ip_vs_twos"); err == nil {
			t.Skip("this kernel has ip_vs_twos")
		}
		mark := s.agent.mark()
		var twos []service
		for i := range 2 {
			svc := tcpService(fmt.Sprintf("tenant-twos-%d", i), fmt.Sprintf("10.96.9.%d", 10+i), bs[1:])
			svc = svc.annotated(map[string]string{annScheduler: "twos"})
			s.cleanupService(t, svc)
			s.put(t, svc)
			twos = append(twos, svc)
		}
		for _, svc := range twos {
			if _, err := s.agent.waitLog(mark, settle, func(e logEntry) bool {
				return e.msg() == "service not applied" && e.str("reason") == "FailedToProgram" && strings.Contains(e.str("service"), svc.name)
			}); err != nil {
				t.Fatalf("%s not reported: %v", svc.name, err)
			}
		}
		// A Node update queues a change of no operation while both retry:
		// the health must not follow their failures.
		s.writeFile(t, "node.yaml", strings.Replace(nodeYAML(), "labels:\n", "labels:\n    tenant-test: \"1\"\n", 1))
		t.Cleanup(func() { s.writeFile(t, "node.yaml", nodeYAML()) })
		window := 16 * time.Second // the retries at 1, 2, 4 and 8 s
		for end := time.Now().Add(window); time.Now().Before(end); time.Sleep(2 * time.Second) {
			quiet(t, mark)
		}
		tab, err := readTable()
		if err != nil {
			t.Fatal(err)
		}
		retries, syncs := 0, 0
		for _, e := range s.agent.since(mark) {
			if e.msg() == "operation failed" && strings.Contains(e.str("op"), " -s twos") {
				retries++
			}
			if isSync(e) {
				syncs++
			}
		}
		for _, svc := range twos {
			if _, ok := tab[svc.vs()]; ok {
				t.Errorf("%s in the table", svc.vs())
			}
		}
		t.Logf("two twos Services over %s: %d syncs, none failed or full; %d tries of their virtual servers (first tries and retries with backoff); /healthz 200 throughout",
			window, syncs, retries)
		if retries > 2*6 {
			t.Errorf("%d tries of the twos virtual servers in %s: not backing off", retries, window)
		}
	})

	t.Run("IPv6 disabled", func(t *testing.T) {
		for _, dev := range []string{"all", "default"} {
			setSysctl(t, "net/ipv6/conf/"+dev+"/disable_ipv6", "1")
		}
		t.Cleanup(func() {
			for _, dev := range []string{"all", "default"} {
				setSysctl(t, "net/ipv6/conf/"+dev+"/disable_ipv6", "0")
			}
		})
		mark := s.agent.mark()
		dual := tcpService("tenant-v6", "10.96.9.20", bs[1:])
		dual.externalIPs = []string{"fd00:96:9::20", "192.0.2.20"}
		s.cleanupService(t, dual)
		s.put(t, dual)
		if _, err := s.agent.waitLog(mark, settle, func(e logEntry) bool {
			return strings.Contains(e.msg(), "IP family is switched off")
		}); err != nil {
			t.Fatalf("no warning about IPv6: %v", err)
		}
		took := waitReals(t, dual, allAt(dual, 1, bs[1:]...))
		full := 0
		for _, e := range s.agent.since(mark) {
			if isFullSync(e) {
				full++ // the one read after the switch
			}
		}
		quiet(t, s.agent.mark())
		if name, err := s.client.ask("", dual.target(), 3*time.Second); err != nil || name != bs[1].name {
			t.Errorf("%s answered by %q, %v; want %s", dual.target(), name, err, bs[1].name)
		}
		out, err := run("ipvsadm", "-Ln")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "fd00:96:9::20") {
			t.Errorf("the IPv6 external IP is programmed with IPv6 off:\n%s", out)
		}
		if !strings.Contains(out, "192.0.2.20:80") {
			t.Errorf("the IPv4 external IP is not programmed:\n%s", out)
		}
		for _, e := range s.agent.since(mark) {
			if e.msg() == "sync failed" || (e.msg() == "operation failed" && strings.Contains(e.str("err"), "fd00:96:9::20")) {
				t.Errorf("agent: %s", e)
			}
		}
		t.Logf("IPv6 off: %s programmed in %s, its IPv6 external IP left out, %d full re-read after the switch, /healthz 200", dual.vs(), took.Round(time.Millisecond), full)
	})
}

// healthz asks the agent's /healthz.
func healthz() (int, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://127.0.0.1:10256/healthz")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func setSysctl(t *testing.T, key, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
		t.Fatalf("sysctl %s=%s: %v", key, value, err)
	}
}
