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
)

// IPVSReader reads the IPVS table over generic netlink, speaking the IPVS
// family directly for what moby/ipvs does not return: 64-bit counters and
// rates, the persistence netmask and engine, thresholds, persistent
// connection counts, tunnel settings, the IPVS version and connection table
// size, the timeouts and the sync daemons, into package ipvstable's types
// (cmd/kube-ipvs hands it to ipvsadm, which renders them). It only reads.
//
// Every request is bounded by its context (or by a default deadline), so an
// unanswered request cannot hang the caller.
type IPVSReader struct {
	conn   *netlink.Conn
	family uint16
}

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

func (r *IPVSReader) resolveFamily(ctx context.Context) (uint16, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(ctrlAttrFamilyName, ipvsGenlName)
	req, err := ae.Encode()
	if err != nil {
		return 0, fmt.Errorf("encode family request: %w", err)
	}
	id, err := read(ctx, r, "resolve the IPVS generic netlink family", ctrlCmdGetFamily, 0, req, decodeFamilyID)
	if errors.Is(err, syscall.ENOENT) {
		return 0, fmt.Errorf("no IPVS generic netlink family (is the ip_vs module loaded?): %w", dataplane.ErrUnsupported)
	}
	return id, err
}

// decodeFamilyID reads the controller's answer about a family.
func decodeFamilyID(msgs []netlink.Message) (uint16, error) {
	var id uint16
	err := eachAttr(msgs, func(ad *netlink.AttributeDecoder) {
		if ad.Type() == ctrlAttrFamilyID {
			id = ad.Uint16()
		}
	})
	if err == nil && id == 0 {
		err = errors.New("no family id in the answer")
	}
	return id, err
}

// execute sends one generic netlink request to the reader's family and
// returns the answers (all parts of a dump), bounded by ctx.
func (r *IPVSReader) execute(ctx context.Context, cmd uint8, flags netlink.HeaderFlags, attrs []byte) ([]netlink.Message, error) {
	data := make([]byte, genlHeaderLen, genlHeaderLen+len(attrs))
	data[0], data[1] = cmd, ipvsGenlVersion // then two reserved bytes
	data = append(data, attrs...)
	return boundedExecute(ctx, r.conn, netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(r.family), Flags: netlink.Request | flags},
		Data:   data,
	})
}

// boundedExecute sends one request on conn and returns its answers (all
// parts of a dump), bounded by ctx's deadline, or by defaultGenlTimeout
// when it has none.
func boundedExecute(ctx context.Context, conn *netlink.Conn, m netlink.Message) ([]netlink.Message, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultGenlTimeout)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, fmt.Errorf("set netlink deadline: %w", err)
	}
	// a cancelled context ends a pending receive at once
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msgs, err := conn.Execute(m)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%w (%w)", ctxErr, err)
		}
		return nil, err
	}
	return msgs, nil
}

// read sends one request and decodes its answers (every part of a dump):
// every kind of message the reader asks for goes through here. what names
// the read in the error.
func read[T any](ctx context.Context, r *IPVSReader, what string, cmd uint8, flags netlink.HeaderFlags, req []byte,
	decode func([]netlink.Message) (T, error)) (T, error) {
	msgs, err := r.execute(ctx, cmd, flags, req)
	if err == nil {
		var v T
		if v, err = decode(msgs); err == nil {
			return v, nil
		}
	}
	var zero T
	return zero, fmt.Errorf("%s: %w", what, err)
}

// genlHeaderLen is struct genlmsghdr: command, version, two reserved bytes.
const genlHeaderLen = 4

// eachAttr is the reader's one decoding loop: it calls fn on every
// attribute of every answer through the library's decoder, whose first
// error (a nested one included, from ad.Nested) it returns.
func eachAttr(msgs []netlink.Message, fn func(ad *netlink.AttributeDecoder)) error {
	for _, m := range msgs {
		if len(m.Data) < genlHeaderLen {
			return fmt.Errorf("short generic netlink message (%d bytes)", len(m.Data))
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[genlHeaderLen:])
		if err != nil {
			return fmt.Errorf("decode generic netlink attributes: %w", err)
		}
		for ad.Next() {
			fn(ad)
		}
		if err := ad.Err(); err != nil {
			return fmt.Errorf("decode generic netlink attributes: %w", err)
		}
	}
	return nil
}

// entries decodes a dump, whose every answer carries one entry nested in
// attribute typ: decode reads it, and an answer without one is an error.
func entries[T any](msgs []netlink.Message, typ uint16, decode func(*netlink.AttributeDecoder) (T, error)) ([]T, error) {
	out := make([]T, 0, len(msgs))
	for _, m := range msgs {
		found := false
		err := eachAttr([]netlink.Message{m}, func(ad *netlink.AttributeDecoder) {
			if ad.Type() != typ {
				return
			}
			found = true
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				v, err := decode(nad)
				out = append(out, v)
				return err
			})
		})
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("reply without attribute %d", typ)
		}
	}
	return out, nil
}
