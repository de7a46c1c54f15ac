package reconciler

import (
	"context"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// readFamilies learns which configured families the node can serve now.
// A family switched off on the link (net.ipv6.conf.*.disable_ipv6=1, a
// common hardening, or a kernel booted without IPv6) is not programmed:
// the kernel refuses each of its addresses with EACCES, and virtual
// servers behind addresses that cannot be bound serve nobody. kube-proxy
// runs single-stack on a kernel without IPv6; a node that disables it by
// sysctl is served the same way, and again dual-stack once it is switched
// back on. Each change is logged once, and every Service is translated
// again (so an IPv6 external IP of any Service is simply not served, as
// single-stack kube-proxy ignores the other family's addresses). Our own
// virtual servers of a family switched off are removed: ownership follows
// the configured families, not the served ones. The kernel drops a
// switched-off family's addresses from the link itself, so the sync after
// a change reads the kernel afresh.
func (r *Reconciler) readFamilies(ctx context.Context) {
	link, err := r.opt.Dataplane.LinkFamilies(ctx)
	if err != nil {
		r.log.Warn("read the IP families the link can hold", zap.Error(err))
		return
	}
	want := r.opt.Translate.Families
	now := model.Families{IPv4: want.IPv4 && link.IPv4, IPv6: want.IPv6 && link.IPv6}
	if now == *r.served.Load() {
		return
	}
	r.served.Store(&now)
	r.refamily, r.needFull = true, true
	if now != want {
		r.log.Warn("an IP family is switched off on this node: its addresses are not programmed",
			zap.Stringer("configured", want), zap.Stringer("served", now))
		return
	}
	r.log.Info("every configured IP family is on again", zap.Stringer("served", now))
}
