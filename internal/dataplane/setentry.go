package dataplane

import (
	"fmt"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// CheckSetEntry refuses a set member no kernel can hold as asked: a network
// (hash:ip,port,net) of prefix length 0. The kernel takes only /1 to /32
// (/128) there, and the netlink library leaves a zero prefix out of the
// request, so the kernel would store the host prefix instead: 0.0.0.0/0
// ("allow everyone") would silently become 0.0.0.0/32 (allow no one). An
// allow-all range means no filter, which is the caller's to decide.
func CheckSetEntry(e model.SetEntry) error {
	if e.Net().IsValid() && e.Net().Bits() == 0 {
		return fmt.Errorf("member %s: a network of prefix length 0 cannot be a set member (the kernel holds /1 to /%d); an allow-all range needs no member",
			e, e.Net().Addr().BitLen())
	}
	return nil
}
