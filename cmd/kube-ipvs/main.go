// Command kube-ipvs is a node agent that load-balances Kubernetes Services
// with the kernel's IPVS. Subcommands: agent, cleanup, ipvsadm, status, diff, version.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `kube-ipvs: load-balance Kubernetes Services with IPVS

Usage:
  kube-ipvs agent [flags]     keep this node's IPVS table in step with the cluster (or --manifests DIR)
  kube-ipvs cleanup [flags]   remove everything kube-ipvs programmed (virtual servers, VIPs, the link)
  kube-ipvs ipvsadm [opts]    list the IPVS table exactly as ipvsadm 1.31 does (-Ln, --stats, --rate, -c, -S ...)
  kube-ipvs status [-o text|wide|json|yaml] [NAMESPACE/NAME ...]
                              the running agent's view: each virtual server with its Service and endpoints
  kube-ipvs diff              what the running agent would change in the kernel now (empty at steady state)
  kube-ipvs version           print the version and the platform built for (linux/arm64)

  kube-ipvs agent --manifests DIR --dry-run [--dry-run-table FILE]
                              print what the agent would do, without root or IPVS (FILE: ipvsadm -Sn output)

Run "kube-ipvs COMMAND -h" or "kube-ipvs help COMMAND" for a command's flags.
`

func main() {
	tuneGC(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the process exit code:
// 0 success, 1 failure, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Invoked through a link named ipvsadm, behave as ipvsadm (listing only);
	// a bare "ipvsadm" lists the table, so this comes before the usage check.
	if len(args) > 0 && filepath.Base(args[0]) == "ipvsadm" {
		return runIPVSAdm(ctx, args[1:], stdout, stderr)
	}
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[1], args[2:]
	switch cmd {
	case "agent":
		return runAgent(ctx, rest, stdout, stderr)
	case "cleanup":
		return runCleanup(ctx, rest, stdout, stderr)
	case "ipvsadm":
		return runIPVSAdm(ctx, rest, stdout, stderr)
	case "status":
		return runStatus(ctx, rest, stdout, stderr)
	case "diff":
		return runDiff(ctx, rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "kube-ipvs", version, runtime.GOOS+"/"+runtime.GOARCH)
		return 0
	case "help", "-h", "--help":
		if len(rest) > 0 && cmd == "help" { // help COMMAND: the command's flags
			return run(ctx, []string{args[0], rest[0], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "kube-ipvs: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// gcPercent is the agent's GOGC unless the environment sets one. The live
// heap is mostly long-lived (the informers' objects, the desired and
// observed tables), so the default 100 lets the heap, and the resident
// size with it, grow to twice that between collections. 25 keeps the peak
// at about 1.25 times the live heap, for no more memory than kube-proxy.
// The agent's first list runs at a percentage of its own. GOMEMLIMIT is
// left to the operator (the runtime reads it): a soft limit near the
// container's memory limit makes the collector work harder only when
// memory runs short.
const gcPercent = 25

// tuneGC sets gcPercent unless GOGC is set.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
