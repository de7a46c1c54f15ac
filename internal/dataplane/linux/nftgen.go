package linux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftables' ruleset generation (include/uapi/linux/netfilter/nf_tables.h).
// The kernel bumps it on every committed change to any table of the
// network namespace, iptables-nft's included: while it stays the same,
// rules found in place are still in place, and the rescan need not run
// iptables-save, a tool that prints the whole ruleset, again to know it.
const (
	nfnlSubsysNFTables = 10
	nftMsgGetGen       = 16
	nftaGenID          = 1
)

// nftGeneration reads the network namespace's ruleset generation.
func nftGeneration(ctx context.Context) (uint32, error) {
	data := []byte{unix.AF_UNSPEC, 0, 0, 0} // nfgenmsg
	var gen uint32
	found := false
	err := netfilterQuery(ctx, nfnlSubsysNFTables<<8|nftMsgGetGen, 0, data, func(m netlink.Message) error {
		return eachNfnlAttr(m, func(typ uint16, v []byte) error {
			if typ == nftaGenID && len(v) >= 4 && !found {
				gen, found = binary.BigEndian.Uint32(v), true
			}
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("read the nftables generation: %w", err)
	}
	if !found {
		return 0, errors.New("read the nftables generation: no generation in the answer")
	}
	return gen, nil
}
