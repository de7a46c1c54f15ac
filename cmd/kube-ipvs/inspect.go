package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/server"
	"github.com/kube-ipvs/kube-ipvs/internal/status"
)

// runStatus prints the running agent's annotated view of this node, or of
// the Services named (NAMESPACE/NAME, as arguments or with --service; a
// bare NAME is in "default", as kubectl reads it): in text, a wide table,
// JSON or YAML. Naming a Service no virtual server serves exits 1.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var addr, output string
	var services []string
	fs := newFlagSet("status", func(fs *pflag.FlagSet) {
		fs.StringVar(&addr, "address", config.DefaultDebugAddress, "the agent's --debug-address")
		fs.StringVarP(&output, "output", "o", "text", "output format: text, wide (a table, a row per real server), json or yaml")
		fs.StringArrayVar(&services, "service", nil, "show only this Service's virtual servers, NAMESPACE/NAME (repeatable; or give them as arguments)")
	})
	fs.SetOutput(stderr)
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if !slices.Contains([]string{"text", "wide", "json", "yaml"}, output) {
		fmt.Fprintf(stderr, "kube-ipvs status: --output=%s: want text, wide, json or yaml\n", output)
		return 2
	}
	names := serviceNames(append(services, fs.Args()...))
	var rep status.Report
	if err := getJSON(ctx, addr, server.PathStatus, &rep); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs status: %v\n", err)
		return 1
	}
	rep = rep.OfServices(names)
	if err := printStatus(stdout, rep, output); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs status: %v\n", err)
		return 1
	}
	if len(names) > 0 && len(rep.VirtualServers) == 0 {
		fmt.Fprintf(stderr, "kube-ipvs status: no virtual server on node %s serves %s\n", rep.Node, strings.Join(names, ", "))
		return 1
	}
	return 0
}

// serviceNames reads NAMESPACE/NAME arguments; a bare NAME is in the
// default namespace.
func serviceNames(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.Contains(a, "/") {
			a = "default/" + a
		}
		out = append(out, a)
	}
	return out
}

// printStatus writes the report in the format asked for.
func printStatus(w io.Writer, rep status.Report, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "yaml":
		data, err := yaml.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case "wide":
		_, err := io.WriteString(w, rep.Wide(time.Now()))
		return err
	}
	_, err := io.WriteString(w, rep.Text(time.Now()))
	return err
}

// runDiff prints what the running agent wants that the kernel does not
// hold now, one ipvsadm-style line per difference; like diff(1) it exits 1
// when there is any, 2 when it cannot tell.
func runDiff(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var addr string
	fs := newFlagSet("diff", func(fs *pflag.FlagSet) {
		fs.StringVar(&addr, "address", config.DefaultDebugAddress, "the agent's --debug-address")
	})
	fs.SetOutput(stderr)
	if code := parseArgs(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	var d server.DiffResponse
	if err := getJSON(ctx, addr, server.PathDiff, &d); err != nil {
		fmt.Fprintf(stderr, "kube-ipvs diff: %v\n", err)
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
