package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kube-ipvs/kube-ipvs/internal/objects"
	"github.com/kube-ipvs/kube-ipvs/internal/source"
)

// synced is what the client reports once its store holds the first list.
type synced struct {
	WallSeconds float64 `json:"wall_s"`
	CPUSeconds  float64 `json:"cpu_s"` // user + system, from the watch path's start
	MaxRSSMB    float64 `json:"max_rss_mb"`
	Services    int     `json:"services"`
}

// clientMain is the agent's watch path alone in its own process, so that
// its CPU is its own: source.NewClient with the options under test,
// source.Kubernetes into an objects.Store, as the agent's Kubernetes
// source builds them. It reports when the store has synced, then answers
// "slices K" and "services K" on stdin once the store has seen K more
// changes of that kind, until stdin ends.
func clientMain(args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	master := fs.String("master", "", "the API server (the counting proxy)")
	http2 := fs.Bool("http2", false, "ClientOptions.HTTP2")
	gzip := fs.Bool("gzip", false, "ClientOptions.Compression")
	node := fs.String("node", "node-0000", "the node the watch path runs as")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cpu0 := cpuSeconds()
	start := time.Now()
	client, err := source.NewClient(source.ClientOptions{Kubeconfig: *kubeconfig, Master: *master,
		QPS: 5, Burst: 10, HTTP2: *http2, Compression: *gzip})
	if err != nil {
		return err
	}
	store := objects.NewStore(source.SourcesKubernetes...)
	k := &source.Kubernetes{Client: client, NodeName: *node, Store: store}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- k.Run(ctx) }()
	for !store.Synced() {
		select {
		case err := <-errc:
			return fmt.Errorf("watch path ended before it synced: %w", err)
		case <-store.Notify():
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("not synced within 10 minutes")
		}
	}
	rep := synced{WallSeconds: time.Since(start).Seconds(), CPUSeconds: cpuSeconds() - cpu0,
		MaxRSSMB: maxRSSMB(), Services: len(store.ServiceNames())}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return err
	}
	base := store.Counts()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		kind, n, ok := strings.Cut(in.Text(), " ")
		want, err := strconv.ParseUint(n, 10, 64)
		if !ok || err != nil {
			return fmt.Errorf("bad request %q", in.Text())
		}
		count := func(c objects.Counts) uint64 { return c.SliceChanges[0] - base.SliceChanges[0] }
		if kind == "services" {
			count = func(c objects.Counts) uint64 { return c.ServiceChanges - base.ServiceChanges }
		}
		if err := waitFor(store, func() bool { return count(store.Counts()) >= want }); err != nil {
			return fmt.Errorf("%s: %w", in.Text(), err)
		}
		fmt.Println("seen")
	}
	return in.Err()
}

func waitFor(store *objects.Store, done func() bool) error {
	timeout := time.After(2 * time.Minute)
	for !done() {
		select {
		case <-store.Notify():
		case <-timeout:
			return fmt.Errorf("not seen within 2 minutes")
		}
	}
	return nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func maxRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // Linux: KiB
}
