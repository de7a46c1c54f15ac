package multinode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// localExternalIP is the external IP the "local" Service is given while
// testLocalFromInside runs; the outside namespace routes it via node-3.
const localExternalIP = "198.51.100.81"

// testLocalFromInside: node-3 has no pod of "local" (its one pod runs on
// node-1). A pod on node-3 (cli-3) and node-3 itself reach the Service's
// external IP and NodePort on node-3 and are answered by local-1 on
// node-1, as kube-proxy's iptables and nftables modes serve such traffic;
// an outside client routed to node-3 is refused there, as before.
func testLocalFromInside(ctx context.Context, t *testing.T, c *cluster, sc *scenario) {
	spec := c.svcs["local"]
	with := spec
	with.externalIPs = []string{localExternalIP}
	if err := c.updateService(ctx, with); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.updateService(ctx, spec); err != nil {
			t.Errorf("taking the external IP back: %v", err)
		}
	}()
	if err := ip("-n", outsideNS, "route", "add", localExternalIP+"/32", "via", nodeAddr(3)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ip("-n", outsideNS, "route", "del", localExternalIP+"/32") }()

	mark := translate.LocalSourcesMark(model.ServiceName{Namespace: ns, Name: "local"}, "tcp", model.TCP, false, 0)
	fwm := fmt.Sprintf("-f %d", mark)
	ext := fmt.Sprintf("-t %s:80", localExternalIP)
	local1 := "10.244.1.11:8080"
	if err := c.waitTables("node-3's Local frontends empty, its firewall-mark server on local-1", func(n *node, tab Table) bool {
		_, hasExt := tab[ext]
		return hasExt && len(tab.Reals(ext)) == 0 && slices.Equal(tab.Reals(fwm), []string{local1})
	}, c.node(3)); err != nil {
		t.Fatal(err)
	}

	targets := []string{localExternalIP + ":80", nodeAddr(3) + ":30081"}
	for _, from := range []string{"cli-3", nodeName(3)} {
		for _, target := range targets {
			got := map[string]int{}
			for i := range 5 {
				a, err := ask(ctx, from, "tcp", target, 3*time.Second)
				if err != nil {
					t.Errorf("%s -> %s: request %d: %v", from, target, i+1, err)
					break
				}
				got[a.backend]++
			}
			if got["local-1"] != 5 {
				t.Errorf("%s -> %s: answered by %v, want local-1 (on node-1) every time", from, target, got)
			}
			sc.notes = append(sc.notes, fmt.Sprintf("%s -> %s: %s", from, target, counts(got)))
		}
	}
	for _, target := range targets {
		start := time.Now()
		a, err := ask(ctx, outsideNS, "tcp", target, 3*time.Second)
		if err == nil {
			t.Errorf("outside -> %s: answered by %s, want refused (no local endpoint on node-3)", target, a.backend)
			continue
		}
		sc.notes = append(sc.notes, fmt.Sprintf("outside -> %s: refused after %s", target, time.Since(start).Round(time.Millisecond)))
	}
	sc.tables = append(c.tablesOf(ext), c.tablesOf(fwm)...)
}
