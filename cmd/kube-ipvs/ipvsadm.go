package main

import (
	"context"
	"io"
	"os"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/ipvsadm"
)

// runIPVSAdm is `kube-ipvs ipvsadm ARGS` (and the binary invoked through a
// link named ipvsadm): ipvsadm 1.31's listings, byte for byte, read over
// generic netlink. Commands that would change the table are refused.
func runIPVSAdm(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var reader *linux.IPVSReader
	defer func() {
		if reader != nil {
			reader.Close()
		}
	}()
	env := ipvsadm.Env{
		Prog: "ipvsadm",
		Open: func(ctx context.Context) (ipvsadm.Kernel, error) {
			r, err := linux.OpenIPVSReader(ctx)
			if err != nil {
				return nil, err
			}
			reader = r
			return r, nil
		},
		ReadConns: func() ([]byte, error) { return os.ReadFile(ipvsadm.ConnFile) },
		Names:     &ipvsadm.SystemNames{},
		Stdout:    stdout,
		Stderr:    stderr,
	}
	return ipvsadm.Run(ctx, args, env)
}
