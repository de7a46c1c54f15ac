//go:build linux

package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

// IPVSReader reads the IPVS table over generic netlink with the package's
// codec: 64-bit counters and rates, the persistence netmask and engine,
// thresholds, persistent connection counts, tunnel settings, the IPVS
// version and connection table size, the timeouts and the sync daemons,
// into package ipvstable's types (cmd/kube-ipvs hands it to ipvsadm, which
// renders them). It only reads.
//
// Every request is bounded by its context (or by a default deadline), so an
// unanswered request cannot hang the caller.
type IPVSReader struct {
	s      *socket
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
	ipvsCmdSetConfig  = 12
	ipvsCmdGetConfig  = 13
	ipvsCmdGetInfo    = 15
)

// OpenIPVSReader opens a generic netlink socket and resolves the IPVS
// family. A kernel without IPVS yields an error wrapping
// dataplane.ErrUnsupported.
func OpenIPVSReader(ctx context.Context) (*IPVSReader, error) {
	s, err := openSocket(unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("dial generic netlink: %w", err)
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	fam, err := ipvsFamilyID(ctx, s)
	if err != nil {
		s.close()
		return nil, err
	}
	return &IPVSReader{s: s, family: fam}, nil
}

// Close releases the socket.
func (r *IPVSReader) Close() error {
	r.s.close()
	return nil
}

// withDefaultDeadline gives ctx defaultGenlTimeout when it has no deadline.
func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultGenlTimeout)
}

// ipvsFamilyID asks the generic netlink controller for the IPVS family's
// id. The lookup makes the kernel load ip_vs if it is a module; a kernel
// without IPVS answers ENOENT, an error wrapping dataplane.ErrUnsupported.
func ipvsFamilyID(ctx context.Context, s *socket) (uint16, error) {
	var a attrBuf
	a.b = append(a.b, ctrlCmdGetFamily, 1, 0, 0) // genlmsghdr: command, version
	a.str(ctrlAttrFamilyName, ipvsGenlName)
	var msgs []netlink.Message
	err := s.query(ctx, genlIDCtrl, 0, a.b, func(m netlink.Message) error {
		msgs = append(msgs, netlink.Message{Header: m.Header, Data: bytes.Clone(m.Data)})
		return nil
	})
	if errors.Is(err, syscall.ENOENT) {
		return 0, fmt.Errorf("no IPVS generic netlink family (is the ip_vs module loaded?): %w", dataplane.ErrUnsupported)
	}
	if err != nil {
		return 0, fmt.Errorf("resolve the IPVS generic netlink family: %w", err)
	}
	id, err := decodeFamilyID(msgs)
	if err != nil {
		return 0, fmt.Errorf("resolve the IPVS generic netlink family: %w", err)
	}
	return id, nil
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

// genlMessage is a request to the IPVS family: the generic netlink header
// (command, version, two reserved bytes), then attrs.
func genlMessage(cmd uint8, attrs []byte) []byte {
	data := make([]byte, genlHeaderLen, genlHeaderLen+len(attrs))
	data[0], data[1] = cmd, ipvsGenlVersion
	return append(data, attrs...)
}

// read sends one request and decodes its answers (every part of a dump):
// every kind of message the reader asks for goes through here. what names
// the read in the error.
func read[T any](ctx context.Context, r *IPVSReader, what string, cmd uint8, flags uint16, req []byte,
	decode func([]netlink.Message) (T, error)) (T, error) {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	var msgs []netlink.Message
	err := r.s.query(ctx, r.family, flags, genlMessage(cmd, req), func(m netlink.Message) error {
		msgs = append(msgs, netlink.Message{Header: m.Header, Data: bytes.Clone(m.Data)})
		return nil
	})
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
