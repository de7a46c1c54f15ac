package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// transport is one of the four client settings measured.
type transport struct {
	HTTP2, Gzip bool
}

func (t transport) String() string {
	s := "HTTP/1.1"
	if t.HTTP2 {
		s = "HTTP/2"
	}
	if t.Gzip {
		return s + " + gzip"
	}
	return s + " identity"
}

var transports = []transport{{false, false}, {false, true}, {true, false}, {true, true}}

// result is one measured client.
type result struct {
	N         int       `json:"n"`
	Run       int       `json:"run"`
	Transport string    `json:"transport"`
	List      traffic   `json:"first_list"`      // from the client's start to its store synced
	Settled   traffic   `json:"after_2s"`        // the 2 s after that (watches opening)
	Slice     traffic   `json:"slice_changes"`   // K EndpointSlice changes, until the store saw them
	Service   traffic   `json:"service_changes"` // K Service changes, likewise
	Node      traffic   `json:"node_changes"`    // K Node heartbeats, until the stream is quiet for 1 s
	Changes   int       `json:"changes"`
	Client    synced    `json:"client"`
	ServerCPU float64   `json:"server_cpu_s"`  // the API server's CPU over the first list, its idle rate taken out
	Requests  verbCount `json:"list_requests"` // the API server's count of the first list's requests, by verb
}

type runFlags struct {
	kubeconfig string
	pid        int
	ns         []int
	eps, nodes int
	changes    int
	runs       int
	out        string
}

func runMain(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f runFlags
	var ns string
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "an admin kubeconfig of the API server")
	fs.IntVar(&f.pid, "apiserver-pid", 0, "the kube-apiserver's process id (its CPU is read from /proc)")
	fs.StringVar(&ns, "ns", "1000,5000", "numbers of Services, ascending, comma-separated")
	fs.IntVar(&f.eps, "endpoints", 10, "endpoints per Service")
	fs.IntVar(&f.nodes, "nodes", 100, "Nodes in the cluster (the endpoints spread over them; the agent lists them all)")
	fs.IntVar(&f.changes, "changes", 100, "EndpointSlice changes and Service changes per client")
	fs.IntVar(&f.runs, "runs", 3, "runs of each transport per N, the order rotated")
	fs.StringVar(&f.out, "out", "", "directory for results.jsonl and table.md (default: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--ns: bad number %q", s)
		}
		f.ns = append(f.ns, n)
	}
	if f.pid == 0 || f.kubeconfig == "" {
		return fmt.Errorf("--kubeconfig and --apiserver-pid are required")
	}
	return run(context.Background(), f)
}

func run(ctx context.Context, f runFlags) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", f.kubeconfig, err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return fmt.Errorf("API server URL %q: %w", cfg.Host, err)
	}
	cfg.QPS, cfg.Burst = 2000, 4000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var sink io.Writer = io.Discard
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return err
		}
		fh, err := os.Create(filepath.Join(f.out, "results.jsonl"))
		if err != nil {
			return err
		}
		defer fh.Close()
		sink = fh
	}
	c := &cluster{cs: cs, eps: f.eps, nodes: f.nodes}
	var all []result
	for _, n := range f.ns {
		t0 := time.Now()
		if err := c.grow(ctx, n); err != nil {
			return err
		}
		logf("N=%d: filled in %.1f s", n, time.Since(t0).Seconds())
		idle, err := idleRate(f.pid, 5*time.Second)
		if err != nil {
			return err
		}
		logf("N=%d: the API server idles at %.3f CPU-s/s", n, idle)
		for r := 0; r < f.runs; r++ {
			for j := range transports {
				t := transports[(j+r)%len(transports)]
				res, err := measure(ctx, f, c, u.Host, t, idle)
				if err != nil {
					return fmt.Errorf("N=%d run %d %s: %w", n, r+1, t, err)
				}
				res.N, res.Run = n, r+1
				logf("N=%d run %d %-20s list %6.2f MB down %7.1f KB up, %d conns, %5.2f s, client %5.2f CPU-s, server %5.2f CPU-s; per slice change %5.0f B, per Service change %5.0f B",
					n, r+1, t, mb(res.List.Down), float64(res.List.Up)/1e3, res.List.Conns, res.Client.WallSeconds,
					res.Client.CPUSeconds, res.ServerCPU, per(res.Slice.Down, res.Changes), per(res.Service.Down, res.Changes))
				all = append(all, res)
				if err := json.NewEncoder(sink).Encode(res); err != nil {
					return err
				}
			}
		}
	}
	tab := table(all, f)
	fmt.Print(tab)
	if f.out != "" {
		return os.WriteFile(filepath.Join(f.out, "table.md"), []byte(tab), 0o644)
	}
	return nil
}

// measure runs one client through a fresh proxy.
func measure(ctx context.Context, f runFlags, c *cluster, apiAddr string, t transport, idle float64) (result, error) {
	res := result{Transport: t.String(), Changes: f.changes}
	p, err := startProxy(apiAddr)
	if err != nil {
		return res, err
	}
	defer p.close()
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, self, "client", "--kubeconfig", f.kubeconfig, "--master", "https://"+p.addr(),
		"--http2="+strconv.FormatBool(t.HTTP2), "--gzip="+strconv.FormatBool(t.Gzip))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	before, err := apiRequests(ctx, c.cs)
	if err != nil {
		return res, err
	}
	cpu0, err := procCPU(f.pid)
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	out := bufio.NewReader(stdout)
	line, err := out.ReadBytes('\n')
	if err != nil {
		return res, fmt.Errorf("client ended before it synced: %w", err)
	}
	cpu1, err := procCPU(f.pid)
	if err != nil {
		return res, err
	}
	res.List = p.read()
	if err := json.Unmarshal(line, &res.Client); err != nil {
		return res, fmt.Errorf("client said %q: %w", line, err)
	}
	res.ServerCPU = cpu1 - cpu0 - idle*res.Client.WallSeconds
	after, err := apiRequests(ctx, c.cs)
	if err != nil {
		return res, err
	}
	res.Requests = after.minus(before)
	if res.Client.Services < len(c.services) {
		return res, fmt.Errorf("the store holds %d Services, the server %d", res.Client.Services, len(c.services))
	}
	time.Sleep(2 * time.Second)
	t2 := p.read()
	res.Settled = t2.minus(res.List)
	ask := func(req string) error {
		if _, err := fmt.Fprintln(stdin, req); err != nil {
			return err
		}
		l, err := out.ReadString('\n')
		if err != nil || l != "seen\n" {
			return fmt.Errorf("%s: client said %q: %v", req, l, err)
		}
		return nil
	}
	if err := c.changeSlices(ctx, f.changes); err != nil {
		return res, err
	}
	if err := ask(fmt.Sprintf("slices %d", f.changes)); err != nil {
		return res, err
	}
	t3 := p.read()
	res.Slice = t3.minus(t2)
	if err := c.changeServices(ctx, f.changes); err != nil {
		return res, err
	}
	if err := ask(fmt.Sprintf("services %d", f.changes)); err != nil {
		return res, err
	}
	t4 := p.read()
	res.Service = t4.minus(t3)
	// The store keeps no count of other Nodes' updates (a heartbeat
	// changes nothing it keeps): wait until the stream is quiet.
	if c.nodes > 0 {
		if err := c.changeNodes(ctx, f.changes); err != nil {
			return res, err
		}
		res.Node = quiet(p).minus(t4)
	}
	return res, nil
}

// quiet is the proxy's counters once nothing has moved for a second.
func quiet(p *proxy) traffic {
	last := p.read()
	still := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		now := p.read()
		if now.Down != last.Down || now.Up != last.Up {
			last, still = now, time.Now()
		} else if time.Since(still) >= time.Second {
			break
		}
	}
	return last
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "apicost: "+format+"\n", a...)
}

func mb(b int64) float64 { return float64(b) / 1e6 }

func per(b int64, k int) float64 {
	if k == 0 {
		return 0
	}
	return float64(b) / float64(k)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
