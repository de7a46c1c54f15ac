package linux

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// More of ipset's netlink protocol (the rest is in shim_batch.go).
const (
	ipsetCmdList         = 7
	ipsetAttrFlags       = 6      // IPSET_ATTR_FLAGS, at command level
	ipsetFlagListSetName = 1 << 1 // IPSET_FLAG_LIST_SETNAME
	nfgenmsgLen          = 4
)

// ipsetNames lists the names of the kernel's sets, without their members,
// as `ipset list -n` does. Listing every set whole to learn the names, as
// the netlink library's IpsetListAll does, reads every member of a set of
// 100,000 (seconds under emulation, past the cleanup's deadline in the
// contract suite) and returns such a set once per message it spans.
func ipsetNames(ctx context.Context) ([]string, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("dial netfilter netlink: %w", err)
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultGenlTimeout)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("set netlink deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	ae := netlink.NewAttributeEncoder()
	ae.Uint8(ipsetAttrProto, ipsetProtocol)
	// The command-level flags travel in network byte order.
	ae.Bytes(ipsetAttrFlags|unix.NLA_F_NET_BYTEORDER, binary.BigEndian.AppendUint32(nil, ipsetFlagListSetName))
	attrs, err := ae.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode ipset list request: %w", err)
	}
	// nfgenmsg as ipset(8) sends it: family AF_INET, version 0, res_id 0.
	data := append([]byte{unix.AF_INET, 0, 0, 0}, attrs...)
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(nfnlSubsysIPSet<<8 | ipsetCmdList),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: data,
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%w (%w)", ctxErr, err)
		}
		return nil, err
	}
	return decodeSetNames(msgs)
}

// decodeSetNames reads the set name of each answer, each name once.
func decodeSetNames(msgs []netlink.Message) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for _, m := range msgs {
		if len(m.Data) < nfgenmsgLen {
			return nil, fmt.Errorf("short ipset message (%d bytes)", len(m.Data))
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[nfgenmsgLen:])
		if err != nil {
			return nil, fmt.Errorf("decode ipset attributes: %w", err)
		}
		for ad.Next() {
			if ad.Type() != ipsetAttrName {
				continue
			}
			name := strings.TrimRight(ad.String(), "\x00")
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
		if err := ad.Err(); err != nil {
			return nil, fmt.Errorf("decode ipset attributes: %w", err)
		}
	}
	return names, nil
}
