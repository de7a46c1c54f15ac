//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
	"github.com/kube-ipvs/kube-ipvs/internal/ipvsadm"
)

// IPVSReader reads the IPVS table over generic netlink, speaking the IPVS
// family directly for what moby/ipvs does not return: 64-bit counters and
// rates, the persistence netmask and engine, thresholds, persistent
// connection counts, tunnel settings, the IPVS version and connection table
// size, the timeouts and the sync daemons. It only reads.
//
// Every request is bounded by its context (or by a default deadline), so an
// unanswered request cannot hang the caller.
type IPVSReader struct {
	conn   *netlink.Conn
	family uint16
}

var _ ipvsadm.Kernel = (*IPVSReader)(nil)

// defaultGenlTimeout bounds a request whose context has no deadline.
const defaultGenlTimeout = 30 * time.Second

// Generic netlink controller and IPVS family constants
// (include/uapi/linux/genetlink.h, include/uapi/linux/ip_vs.h).
const (
	genlIDCtrl         = 0x10
	ctrlCmdGetFamily   = 3
	ctrlAttrFamilyID   = 1
	ctrlAttrFamilyName = 2

	ipvsGenlName    = "IPVS"
	ipvsGenlVersion = 1

	ipvsCmdGetService = 4
	ipvsCmdGetDest    = 8
	ipvsCmdGetDaemon  = 11
	ipvsCmdGetConfig  = 13
	ipvsCmdGetInfo    = 15
)

// OpenIPVSReader dials generic netlink and resolves the IPVS family. A
// kernel without IPVS yields an error wrapping dataplane.ErrUnsupported.
func OpenIPVSReader(ctx context.Context) (*IPVSReader, error) {
	conn, err := netlink.Dial(unix.NETLINK_GENERIC, nil)
	if err != nil {
		return nil, fmt.Errorf("dial generic netlink: %w", err)
	}
	r := &IPVSReader{conn: conn, family: genlIDCtrl}
	fam, err := r.resolveFamily(ctx)
	if err != nil {
		conn.Close()
		return nil, err
	}
	r.family = fam
	return r, nil
}

// Close releases the socket.
func (r *IPVSReader) Close() error { return r.conn.Close() }

// ReadListing is one full read: info, every service with its destinations,
// and the timeouts.
func ReadListing(ctx context.Context) (ipvsadm.Listing, error) {
	r, err := OpenIPVSReader(ctx)
	if err != nil {
		return ipvsadm.Listing{}, err
	}
	defer r.Close()
	var l ipvsadm.Listing
	if l.Info, err = r.Info(ctx); err != nil {
		return l, err
	}
	if l.Services, err = r.Services(ctx); err != nil {
		return l, err
	}
	if l.Timeouts, err = r.Timeouts(ctx); err != nil {
		return l, err
	}
	return l, nil
}

func (r *IPVSReader) resolveFamily(ctx context.Context) (uint16, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(ctrlAttrFamilyName, ipvsGenlName)
	attrs, err := ae.Encode()
	if err != nil {
		return 0, fmt.Errorf("encode family request: %w", err)
	}
	msgs, err := r.execute(ctx, ctrlCmdGetFamily, 0, attrs)
	if errors.Is(err, syscall.ENOENT) {
		return 0, fmt.Errorf("no IPVS generic netlink family (is the ip_vs module loaded?): %w", dataplane.ErrUnsupported)
	}
	if err != nil {
		return 0, fmt.Errorf("resolve the IPVS generic netlink family: %w", err)
	}
	for _, m := range msgs {
		as, err := genlAttrs(m)
		if err != nil {
			return 0, err
		}
		for _, a := range as {
			if a.Type == ctrlAttrFamilyID && len(a.Data) >= 2 {
				return nativeUint16(a.Data), nil
			}
		}
	}
	return 0, fmt.Errorf("resolve the IPVS generic netlink family: no family id in the answer")
}

// execute sends one generic netlink request to the reader's family and
// returns the answers (all parts of a dump), bounded by ctx.
func (r *IPVSReader) execute(ctx context.Context, cmd uint8, flags netlink.HeaderFlags, attrs []byte) ([]netlink.Message, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultGenlTimeout)
	}
	if err := r.conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("set netlink deadline: %w", err)
	}
	// a cancelled context ends a pending receive at once
	stop := context.AfterFunc(ctx, func() { _ = r.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	data := make([]byte, 4, 4+len(attrs))
	data[0], data[1] = cmd, ipvsGenlVersion // then two reserved bytes
	data = append(data, attrs...)
	msgs, err := r.conn.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(r.family), Flags: netlink.Request | flags},
		Data:   data,
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%w (%w)", ctxErr, err)
		}
		return nil, err
	}
	return msgs, nil
}

// genlAttrs skips a message's generic netlink header and splits its
// attributes.
func genlAttrs(m netlink.Message) ([]netlink.Attribute, error) {
	if len(m.Data) < 4 {
		return nil, fmt.Errorf("short generic netlink message (%d bytes)", len(m.Data))
	}
	as, err := netlink.UnmarshalAttributes(m.Data[4:])
	if err != nil {
		return nil, fmt.Errorf("decode generic netlink attributes: %w", err)
	}
	return as, nil
}
