package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/metrics"
	"github.com/kube-ipvs/kube-ipvs/internal/reconciler"
	"github.com/kube-ipvs/kube-ipvs/internal/server"
	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

// views answers /healthz's Node eligibility, /metrics' table and the
// debug endpoints from what the reconciler published after its last sync.
// None of them takes a lock or waits for a sync (the runner alone calls
// Sync), so a sync stuck in the kernel never stalls them.
type views struct {
	rec  *reconciler.Reconciler
	node string
}

// Status implements server.Inspector.
func (v views) Status() status.Report { return status.Build(v.node, v.rec.View()) }

// Drift implements server.Inspector.
func (v views) Drift(ctx context.Context) ([]string, error) {
	ops, err := v.rec.Drift(ctx)
	lines := make([]string, len(ops))
	for i, op := range ops {
		lines[i] = op.String()
	}
	return lines, err
}

// table counts the kernel table for a scrape.
func (v views) table() metrics.Table { return v.rec.View().Table() }

// nodeEligible is /healthz's verdict on the Node, as of the last sync.
// From a cluster (needNode), an unknown Node is not eligible, as in
// kube-proxy; a manifest folder need not hold a Node, and without one the
// node is eligible.
func (v views) nodeEligible(needNode bool) func() bool {
	return func() bool {
		n := v.rec.View().Node
		if !n.Seen {
			return !needNode
		}
		return n.Eligible
	}
}

// runStatus prints the running agent's annotated view of this node.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	addr := fs.String("address", config.DefaultDebugAddress, "the agent's --debug-address")
	output := fs.String("o", "text", "output format: text or json")
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "status: -o: want text or json, got %q\n", *output)
		return 2
	}
	var rep status.Report
	if err := getJSON(ctx, *addr, server.PathStatus, &rep); err != nil {
		fmt.Fprintf(stderr, "status: %v\n", err)
		return 1
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return 0
	}
	fmt.Fprint(stdout, rep.Text(time.Now()))
	return 0
}

// runDiff prints what the running agent wants that the kernel does not
// hold now, one ipvsadm-style line per difference; like diff(1) it exits 1
// when there is any.
func runDiff(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	addr := fs.String("address", config.DefaultDebugAddress, "the agent's --debug-address")
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var d server.DiffResponse
	if err := getJSON(ctx, *addr, server.PathDiff, &d); err != nil {
		fmt.Fprintf(stderr, "diff: %v\n", err)
		return 2
	}
	for _, op := range d.Ops {
		fmt.Fprintln(stdout, op)
	}
	if len(d.Ops) > 0 {
		return 1
	}
	return 0
}

// maxAnswerBytes caps what status and diff read from --address: the
// largest answer, a diff of an emptied kernel at tens of thousands of
// Services, is a few MiB, and an address that is not the agent's (or an
// agent gone wrong) must not make the CLI read without end.
const maxAnswerBytes = 64 << 20

func getJSON(ctx context.Context, addr, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("is the agent running with --debug-address %s? %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("agent answered %s: %s", resp.Status, body)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return fmt.Errorf("read the agent's answer: %w", err)
	}
	if len(body) > maxAnswerBytes {
		return fmt.Errorf("the agent's answer is over the %d bytes read", maxAnswerBytes)
	}
	return json.Unmarshal(body, v)
}
