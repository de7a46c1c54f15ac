package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Scenario 7: bad input. A malformed manifest dropped into the folder, a
// live file broken by an edit, a Service with an unknown scheduler, and a
// FIFO and a symlink to /dev/zero named like manifests each leave the
// running table exactly as it was and are reported in the agent's log;
// fixing the files applies them.
func TestBadInput(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "bad", 7, 2)
	live := tcpService("bad-live", "10.96.7.1", bs[:1])
	s.ready(t, live, bs[0])
	fixed := tcpService("broken", "10.96.7.2", bs[1:]) // what broken.yaml becomes
	s.cleanupService(t, fixed)

	// unchangedAfter makes a bad file and requires the agent to report it
	// and then check the whole kernel without changing anything;
	// unchanged writes one.
	unchangedAfter := func(t *testing.T, file string, change func(), reported func(logEntry) bool) {
		t.Helper()
		before := saveTable(t)
		mark := s.agent.mark()
		change()
		e, next, err := s.agent.waitLogAt(mark, settle, reported)
		if err != nil {
			t.Fatalf("the agent did not report the bad %s: %v", file, err)
		}
		t.Logf("agent reported: %s", e)
		if _, err := s.agent.waitLog(next, settle, isCheck); err != nil {
			t.Fatalf("no check of the kernel after the report: %v", err)
		}
		for _, e := range s.agent.since(mark) {
			if isSync(e) && e.int("ops") != 0 {
				t.Errorf("the agent applied operations after the bad %s: %s", file, e)
			}
		}
		after := saveTable(t)
		if strings.Join(before, "\n") != strings.Join(after, "\n") {
			t.Errorf("the table changed after the bad %s:\nbefore:\n%s\nafter:\n%s", file, strings.Join(before, "\n"), strings.Join(after, "\n"))
		}
		if name, err := s.client.ask("", live.target(), 3*time.Second); err != nil || name != bs[0].name {
			t.Errorf("%s after the bad %s: answered by %q, %v; want %s", live.target(), file, name, err, bs[0].name)
		}
	}
	unchanged := func(t *testing.T, file, content string, reported func(logEntry) bool) {
		t.Helper()
		unchangedAfter(t, file, func() { s.writeFile(t, file, content) }, reported)
	}
	problemIn := func(file string) func(logEntry) bool {
		return func(e logEntry) bool {
			return e.msg() == "manifest problem" && strings.HasSuffix(e.str("file"), file) && e.str("err") != ""
		}
	}

	t.Run("malformed new file", func(t *testing.T) {
		unchanged(t, fixed.file(), "apiVersion: v1\nkind: Service\nmetadata: {name: broken, namespace: e2e\nspec: [\n",
			problemIn(fixed.file()))
	})

	t.Run("live file broken by an edit", func(t *testing.T) {
		// The file loses its end mid-document, as a careless copy would.
		y := live.with(endpoint{addr: bs[0].addr}, endpoint{addr: bs[1].addr}).yaml()
		cut := y[:strings.LastIndex(y, "conditions:")] + "conditions: {ready: tr\n"
		unchanged(t, live.file(), cut, problemIn(live.file()))
	})

	t.Run("unknown scheduler", func(t *testing.T) {
		bad := live.with(endpoint{addr: bs[0].addr}, endpoint{addr: bs[1].addr}).annotated(map[string]string{annScheduler: "no-such-scheduler"})
		unchanged(t, live.file(), bad.yaml(), func(e logEntry) bool {
			return e.msg() == "service not applied" && strings.Contains(e.str("service"), live.name)
		})
	})

	// A FIFO or a symlink to /dev/zero named like a manifest would hang
	// the loader or fill its memory: they are reported and left unread.
	t.Run("FIFO named like a manifest", func(t *testing.T) {
		path := filepath.Join(s.dir, "fifo.yaml")
		t.Cleanup(func() { os.Remove(path) })
		unchangedAfter(t, "fifo.yaml", func() {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, problemIn("fifo.yaml"))
	})

	t.Run("symlink to /dev/zero named like a manifest", func(t *testing.T) {
		path := filepath.Join(s.dir, "zero.yaml")
		t.Cleanup(func() { os.Remove(path) })
		unchangedAfter(t, "zero.yaml", func() {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}, problemIn("zero.yaml"))
	})

	t.Run("fixing the files applies them", func(t *testing.T) {
		s.put(t, fixed)
		took := waitReals(t, fixed, allAt(fixed, 1, bs[1]))
		t.Logf("the fixed %s applied: %s programmed after %s", fixed.file(), fixed.vs(), took.Round(time.Millisecond))
		grown := live.with(endpoint{addr: bs[0].addr}, endpoint{addr: bs[1].addr})
		s.put(t, grown)
		took = waitReals(t, grown, allAt(grown, 1, bs...))
		t.Logf("the fixed %s applied: %s holds both backends after %s", live.file(), live.vs(), took.Round(time.Millisecond))
		got := s.askN(t, "", live.target(), 10)
		if len(got) != 2 {
			t.Errorf("after the fix %s reached %s; want both backends", live.target(), got)
		}
		if name, err := s.client.ask("", fixed.target(), 3*time.Second); err != nil || name != bs[1].name {
			t.Errorf("%s: answered by %q, %v; want %s", fixed.target(), name, err, bs[1].name)
		}
	})
}

// Scenario 7b: one bad object in a file of several. Each object stands on
// its own, as with kubectl apply -f: on a fresh start the file's good
// Services are programmed and the bad one is reported with its file,
// document and field; an edit that breaks a live Service keeps it at its
// last good version while the file's other changes apply.
func TestBadObjectInAFile(t *testing.T) {
	s := setup(t)
	bs := s.startBackends(t, "obj", 21, 3)
	a := tcpService("obj-a", "10.96.21.1", bs[:1])
	b := tcpService("obj-b", "10.96.21.2", bs[1:2])
	c := tcpService("obj-c", "10.96.21.3", bs[2:])
	const file = "objects.yaml"
	// Each Service is two documents, Service then EndpointSlice: b's
	// Service is document 3, c's document 5.
	badPort := func(svc service) string {
		return strings.Replace(svc.yaml(), "      port: 80\n", "      port: 70000\n", 1)
	}
	write := func(docs ...string) { s.writeFile(t, file, strings.Join(docs, "---\n")) }
	t.Cleanup(func() {
		s.removeFile(t, file)
		if _, err := waitFor(settle, func() (bool, string) {
			tab, err := readTable()
			if err != nil {
				return false, err.Error()
			}
			for _, svc := range []service{a, b, c} {
				if _, ok := tab[svc.vs()]; ok {
					return false, svc.vs() + " still listed"
				}
			}
			return true, ""
		}); err != nil {
			t.Errorf("cleaning up %s: %v", file, err)
		}
	})
	problemAt := func(doc int, field string, kept bool) func(logEntry) bool {
		return func(e logEntry) bool {
			return e.msg() == "manifest problem" && strings.HasSuffix(e.str("file"), "/"+file) &&
				e.int("doc") == doc && strings.Contains(e.str("err"), field) && e.bool("lastGoodKept") == kept
		}
	}

	t.Run("fresh start with one bad Service", func(t *testing.T) {
		if err := s.agent.stop(); err != nil {
			t.Fatalf("stopping the agent: %v", err)
		}
		write(a.yaml(), badPort(b), c.yaml())
		if err := s.startAgent(); err != nil {
			t.Fatalf("starting the agent: %v", err)
		}
		e, err := s.agent.waitLog(0, settle, problemAt(3, "spec.ports[0].port: must be 1-65535, got 70000", false))
		if err != nil {
			t.Fatalf("the bad Service was not reported with its file, document and field: %v", err)
		}
		t.Logf("agent reported: %s", e)
		took := waitReals(t, a, allAt(a, 1, bs[0]))
		waitReals(t, c, allAt(c, 1, bs[2]))
		t.Logf("the good Services of %s served after the start, %s", file, took.Round(time.Millisecond))
		tab, err := readTable()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := tab[b.vs()]; ok {
			t.Errorf("the refused Service is programmed: %s", tab.weights(b.vs()))
		}
		for _, served := range []struct {
			svc service
			b   *backend
		}{{a, bs[0]}, {c, bs[2]}} {
			if name, err := s.client.ask("", served.svc.target(), 3*time.Second); err != nil || name != served.b.name {
				t.Errorf("%s: answered by %q, %v; want %s", served.svc.target(), name, err, served.b.name)
			}
		}
	})

	t.Run("fixing it serves it", func(t *testing.T) {
		write(a.yaml(), b.yaml(), c.yaml())
		waitReals(t, b, allAt(b, 1, bs[1]))
	})

	t.Run("an edit breaks one Service: it stays at its last good version", func(t *testing.T) {
		before := saveTable(t)
		mark := s.agent.mark()
		grown := a.with(endpoint{addr: bs[0].addr}, endpoint{addr: bs[1].addr})
		write(grown.yaml(), b.yaml(), badPort(c))
		if _, err := s.agent.waitLog(mark, settle, problemAt(5, "spec.ports[0].port: must be 1-65535, got 70000", true)); err != nil {
			t.Fatalf("the broken Service was not reported as kept at its last good version: %v", err)
		}
		waitReals(t, grown, allAt(grown, 1, bs[0], bs[1]))
		after := saveTable(t)
		var cBefore, cAfter []string
		for _, l := range before {
			if strings.Contains(l, c.target()) {
				cBefore = append(cBefore, l)
			}
		}
		for _, l := range after {
			if strings.Contains(l, c.target()) {
				cAfter = append(cAfter, l)
			}
		}
		if len(cBefore) == 0 || strings.Join(cBefore, "\n") != strings.Join(cAfter, "\n") {
			t.Errorf("%s changed:\nbefore:\n%s\nafter:\n%s", c.vs(), strings.Join(cBefore, "\n"), strings.Join(cAfter, "\n"))
		}
		if name, err := s.client.ask("", c.target(), 3*time.Second); err != nil || name != bs[2].name {
			t.Errorf("%s: answered by %q, %v; want %s", c.target(), name, err, bs[2].name)
		}
	})
}
