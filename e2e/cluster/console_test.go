package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/e2e/ipvsdump"
)

func TestParseTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules string
		want  string
	}{
		{"empty", "", ""},
		{"service without reals", "-A -t 10.96.0.1:443 -s rr;", "-t 10.96.0.1:443 -> []"},
		{"reals with weights, any order", "-a -t 10.96.10.10:80 -r 10.244.1.3:8080 -m -w 0;-A -t 10.96.10.10:80 -s rr;-a -t 10.96.10.10:80 -r 10.244.1.2:8080 -m -w 1;",
			"-t 10.96.10.10:80 -> [10.244.1.2:8080 w1, 10.244.1.3:8080 w0]"},
		{"udp and tcp on one address", "-A -u 10.96.0.10:53 -s rr;-A -t 10.96.0.10:53 -s rr;-a -u 10.96.0.10:53 -r 10.244.0.2:53 -m -w 1",
			"-t 10.96.0.10:53 -> []\n-u 10.96.0.10:53 -> [10.244.0.2:53 w1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ipvsdump.Parse(strings.Split(tc.rules, ";")).String(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestConsoleFollow(t *testing.T) {
	stream := strings.Join([]string{
		"[    5.1] virtio_net loaded",
		"agent| source synced services",
		"ipvs-snapshot: -A -t 10.96.10.10:80 -s rr;",
		"[    7.0] noise ipvs-snapshot: -A -t 10.96.10.10:80 -s rr;-a -t 10.96.10.10:80 -r 10.244.1.2:8080 -m -w 1;",
		"agent| forbidden? no",
	}, "\r\n")
	c := newConsole()
	c.follow(strings.NewReader(stream), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tab, err := c.WaitTable(ctx, func(tab Table) bool { return len(tab["-t 10.96.10.10:80"]) == 1 })
	if err != nil {
		t.Fatalf("WaitTable: %v", err)
	}
	if got := tab.String(); got != "-t 10.96.10.10:80 -> [10.244.1.2:8080 w1]" {
		t.Errorf("table %q", got)
	}
	if got := strings.Join(c.AgentLog(), "|"); got != "source synced services|forbidden? no" {
		t.Errorf("agent log %q", got)
	}
	// The stream has ended: a condition that never holds fails instead of hanging.
	if _, err := c.WaitTable(ctx, func(Table) bool { return false }); err == nil {
		t.Error("WaitTable after the stream ended: want an error")
	}
}

func TestConsoleWaitLine(t *testing.T) {
	r, w := io.Pipe()
	c := newConsole()
	go c.follow(r, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		fmt.Fprintln(w, "[ 1.0] noise in-cluster-exit: 0")
		fmt.Fprintln(w, "in-cluster-exit: 1")
		w.Close()
	}()
	// The first line holding the prefix, anywhere on the line.
	if got, err := c.WaitLine(ctx, "in-cluster-exit: "); err != nil || got != "0" {
		t.Errorf("WaitLine: %q, %v; want \"0\"", got, err)
	}
	<-c.done
	if _, err := c.WaitLine(ctx, "never: "); err == nil {
		t.Error("WaitLine after the stream ended without the line: want an error")
	}
}
