package ipvsadm

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/kube-ipvs/kube-ipvs/internal/ipvstable"
)

// Kernel is what the listings read from IPVS. dataplane/linux implements it
// over generic netlink; tests use a Listing.
type Kernel interface {
	Info(ctx context.Context) (ipvstable.Info, error)
	Services(ctx context.Context) ([]ipvstable.Service, error) // with their destinations
	Timeouts(ctx context.Context) (ipvstable.Timeouts, error)
	Daemons(ctx context.Context) ([]ipvstable.Daemon, error)
}

// Env is what Run needs from the outside world.
type Env struct {
	// Prog is the program name in messages ("ipvsadm").
	Prog string
	// Open connects to IPVS; it is called only when a listing needs it.
	Open func(ctx context.Context) (Kernel, error)
	// ReadConns returns the text of ConnFile (for -c).
	ReadConns func() ([]byte, error)
	// Names resolves names for listings without -n; nil prints numbers.
	Names  Names
	Stdout io.Writer
	Stderr io.Writer
}

// Run executes one ipvsadm command line and returns its exit status:
// 0 success, 1 a failed read or a missing service, 2 (or 255, as ipvsadm)
// a bad command line, 2 a command that would change the table.
func Run(ctx context.Context, args []string, env Env) int {
	o := Options{Command: CmdList}
	if len(args) > 0 {
		var err error
		if o, err = Parse(env.Prog, args); err != nil {
			var ue *UsageError
			if errors.As(err, &ue) {
				fmt.Fprintln(env.Stderr, ue.Msg)
				return ue.Code
			}
			fmt.Fprintln(env.Stderr, err)
			return 2
		}
	}
	switch o.Command {
	case CmdHelp:
		fmt.Fprintf(env.Stdout, usageText, env.Prog)
		return 0
	case CmdVersion:
		fmt.Fprintln(env.Stdout, "ipvsadm v1.31 2019/12/24 (compatible listing by kube-ipvs)")
		return 0
	case CmdMutate:
		fmt.Fprintf(env.Stderr, "%s: %s would change the IPVS table, which the kube-ipvs agent owns on this node; "+
			"change the Service or EndpointSlice (or the agent's flags) instead. Nothing was changed.\n", env.Prog, o.Mutate)
		return 2
	}
	out, err := list(ctx, o, env)
	io.WriteString(env.Stdout, out)
	if err != nil {
		fmt.Fprintln(env.Stderr, err)
		return 1
	}
	return 0
}

// errNoService is ipvsadm's message for a -t/-u/-f that names no service.
var errNoService = errors.New("No such service")

// list produces the output of a list or save command.
func list(ctx context.Context, o Options, env Env) (string, error) {
	if o.Connection {
		if env.ReadConns == nil {
			return "", fmt.Errorf("cannot open file %s", ConnFile)
		}
		proc, err := env.ReadConns()
		if err != nil {
			return "", fmt.Errorf("cannot open file %s", ConnFile)
		}
		return RenderConns(o.Format, proc, env.Names)
	}
	k, err := env.Open(ctx)
	if err != nil {
		return "", fmt.Errorf("Can't initialize ipvs: %w", err)
	}
	switch {
	case o.Service != nil:
		svcs, err := k.Services(ctx)
		if err != nil {
			return "", err
		}
		for _, s := range svcs {
			if o.Service.Matches(s) {
				return RenderService(o.Format, s, env.Names), nil
			}
		}
		return "", errNoService
	case o.Timeout:
		t, err := k.Timeouts(ctx)
		if err != nil {
			return "", err
		}
		return RenderTimeouts(t), nil
	case o.Daemon:
		ds, err := k.Daemons(ctx)
		if err != nil {
			return "", err
		}
		return RenderDaemons(ds), nil
	}
	info, err := k.Info(ctx)
	if err != nil {
		return "", err
	}
	svcs, err := k.Services(ctx)
	if err != nil {
		return "", err
	}
	return RenderAll(o.Format, Listing{Info: info, Services: svcs}, env.Names), nil
}

// usageText is kube-ipvs' own help: the listing subset of ipvsadm.
const usageText = `Usage (an ipvsadm 1.31 compatible, read-only listing by kube-ipvs):
  %[1]s -L|l [virtual-service] [options]
  %[1]s -S [-n]
  %[1]s -h

virtual-service:
  --tcp-service|-t  service-address   service-address is host[:port]
  --udp-service|-u  service-address   service-address is host[:port]
  --sctp-service    service-address   service-address is host[:port]
  --fwmark-service|-f fwmark          fwmark is an integer greater than zero
  --ipv6         -6                   fwmark entry uses IPv6

Options:
  --numeric      -n                   numeric output of addresses and ports
  --connection   -c                   output of current IPVS connections
  --timeout                           output of timeout (tcp tcpfin udp)
  --daemon                            output of daemon information
  --stats                             output of statistics information
  --rate                              output of rate information
  --exact        -X                   expand numbers (display exact values)
  --thresholds                        output of thresholds information
  --persistent-conn                   output of persistent connection info
  --tun-info                          output of tunnel information
  --nosort                            disable sorting output of service/server entries
  --sort                              does nothing, for backwards compatibility

Commands that change the table (-A -E -D -C -R -a -e -d -Z --set,
--start-daemon, --stop-daemon) are refused: the kube-ipvs agent owns it.
`
