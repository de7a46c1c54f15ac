package agent

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/fake"
	"github.com/kube-ipvs/kube-ipvs/internal/dataplane/linux"
	"github.com/kube-ipvs/kube-ipvs/internal/ipvsadm"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// dryRunKernel is the kernel a dry run plans against. A dry run only reads
// it (the reconciler neither prepares the node nor applies anything), so
// it need not be this node's: the table saved in table (ipvsadm -Sn's
// output; "-" reads stdin), else this node's kernel, else, where there is
// no IPVS or no right to read it (a laptop, CI), an empty one. The in-memory
// kernel the tests use stands in for the other two: it answers a read as
// the kernel would.
func dryRunKernel(ctx context.Context, c config.Config, table string, stdin io.Reader, log *zap.Logger) (dataplane.Dataplane, error) {
	if table != "" {
		st, err := readSavedTable(table, stdin)
		if err != nil {
			return nil, err
		}
		st.Addrs = savedLink(st, c.NodePortRange)
		k := fake.New()
		k.Load(st)
		log.Info("dry run against a saved table", zap.String("file", table), zap.Int("services", len(st.Services)),
			zap.Int("link_addrs", len(st.Addrs)))
		return k, nil
	}
	dp, err := linux.New(KernelOptions(c, log))
	if err == nil {
		if err = dp.Probe(ctx); err == nil {
			return dp, nil
		}
		_ = dp.Close()
	}
	log.Warn("dry run against an empty kernel: this node's cannot be read (--dry-run-table plans against a saved one)", zap.Error(err))
	return fake.New(), nil
}

// readSavedTable reads and parses --dry-run-table.
func readSavedTable(name string, stdin io.Reader) (model.State, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return model.State{}, fmt.Errorf("--dry-run-table: %w", err)
	}
	st, err := ipvsadm.ParseSave(data)
	if err != nil {
		return model.State{}, fmt.Errorf("--dry-run-table %s: %w", name, err)
	}
	return st, nil
}

// savedLink is what a saved table implies was bound on the link: every
// address a virtual server of it listens on with a port outside the
// NodePort range. ClusterIPs, external IPs and load-balancer IPs are bound
// there (by kube-ipvs and kube-proxy alike), a node's own addresses, where
// only NodePorts listen, are not. A saved table holds no addresses, and
// without these the preview would take every VIP's virtual servers for
// someone else's.
func savedLink(st model.State, nodePorts model.PortRange) map[netip.Addr]struct{} {
	out := map[netip.Addr]struct{}{}
	for k := range st.Services {
		if k.FWMark == 0 && !nodePorts.Contains(k.Port) {
			out[k.Addr] = struct{}{}
		}
	}
	return out
}
