//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// A batch sends many netlink requests in one sendmsg on a socket and reads
// their outcome in bulk: a cold start sends a request per virtual server,
// real server and set member, and waiting a round trip for each would make
// its time grow with the kernel's answer latency rather than with the work.
//
// The requests ask for no acknowledgement: the kernel then answers only
// those that fail, each with an error message carrying the request's
// sequence number, so every error stays tied to its request. Each send
// ends with a NLMSG_NOOP that does ask for one: netlink_rcv_skb handles the
// messages of a send in order and acknowledges a control message without
// passing it to the family, so when the NOOP's acknowledgement arrives every
// request before it has been handled and its error, if any, has been read.
// This holds for every family that parses with netlink_rcv_skb: generic
// netlink (IPVS), rtnetlink (addresses) and nfnetlink outside its
// transactional batches (ipset).
//
// A send carries at most batchWindow requests, so that even when all of
// them fail their error messages fit the socket's default receive buffer:
// an overrun would lose errors, and the kernel would only say ENOBUFS.

// batchWindow bounds the requests of one send. An error message costs
// about 1 KiB of receive buffer (skb overhead included); the default
// buffer (net.core.rmem_default) is 208 KiB.
const batchWindow = 128

// request is one netlink request of a batch: its message type and flags
// (NLM_F_REQUEST is added) and the payload after the netlink header.
type request struct {
	typ   uint16
	flags uint16
	data  []byte
}

// exchange sends reqs (at most batchWindow) in one send, bounded by ctx,
// and returns the kernel's answer to each in errs: nil for done, else the
// errno it failed with. An error of its own means the outcome of the whole
// send is unknown.
func (s *socket) exchange(ctx context.Context, reqs []request, errs []error) error {
	if len(reqs) > batchWindow {
		return fmt.Errorf("%d requests in one send, at most %d", len(reqs), batchWindow)
	}
	return s.within(ctx, func() error {
		first := s.seq + 1
		s.out = s.out[:0]
		for _, r := range reqs {
			s.seq++
			s.out = appendMessage(s.out, r.typ, r.flags|unix.NLM_F_REQUEST, s.seq, r.data)
		}
		s.seq++
		barrier := s.seq
		s.out = appendMessage(s.out, unix.NLMSG_NOOP, unix.NLM_F_REQUEST|unix.NLM_F_ACK, barrier, nil)
		if err := s.send(s.out); err != nil {
			return fmt.Errorf("send %d netlink requests: %w", len(reqs), err)
		}
		clear(errs[:len(reqs)])
		for {
			msgs, err := s.receive()
			if err != nil {
				return err
			}
			done, err := answers(msgs, first, barrier, errs)
			if done {
				s.answered = true
			}
			if err != nil || done {
				return err
			}
		}
	})
}

// answers reads one datagram of answers into errs; done when the barrier's
// acknowledgement is among them.
func answers(msgs []syscall.NetlinkMessage, first, barrier uint32, errs []error) (bool, error) {
	done := false
	for _, m := range msgs {
		if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
			continue // nothing else is expected; a stray answer is not ours
		}
		seq := m.Header.Seq
		errno := errnoOf(m.Data)
		switch {
		case seq == barrier:
			if errno != 0 {
				return false, fmt.Errorf("netlink barrier failed: %w", errno)
			}
			done = true
		case seq >= first && seq < barrier && errno != 0:
			errs[seq-first] = errno
		}
	}
	return done, nil
}

// attrBuf builds netlink attributes into one reused buffer: a request's
// payload without an allocation per attribute.
type attrBuf struct{ b []byte }

// nlaNested is NLA_F_NESTED; nlaNetByteOrder is NLA_F_NET_BYTEORDER.
const (
	nlaNested       = 1 << 15
	nlaNetByteOrder = 1 << 14
)

func (a *attrBuf) put(typ uint16, v []byte) {
	a.b = binary.NativeEndian.AppendUint16(a.b, uint16(4+len(v)))
	a.b = binary.NativeEndian.AppendUint16(a.b, typ)
	a.b = append(a.b, v...)
	for len(a.b)%4 != 0 {
		a.b = append(a.b, 0)
	}
}

func (a *attrBuf) u8(typ uint16, v uint8) { a.put(typ, []byte{v}) }

func (a *attrBuf) u16(typ uint16, v uint16) {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], v)
	a.put(typ, b[:])
}

func (a *attrBuf) be16(typ uint16, v uint16) {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	a.put(typ, b[:])
}

func (a *attrBuf) u32(typ uint16, v uint32) {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	a.put(typ, b[:])
}

// str puts a NUL-terminated string.
func (a *attrBuf) str(typ uint16, s string) {
	a.b = binary.NativeEndian.AppendUint16(a.b, uint16(4+len(s)+1))
	a.b = binary.NativeEndian.AppendUint16(a.b, typ)
	a.b = append(a.b, s...)
	a.b = append(a.b, 0)
	for len(a.b)%4 != 0 {
		a.b = append(a.b, 0)
	}
}

// nest opens a nested attribute; end closes it with its length.
func (a *attrBuf) nest(typ uint16) int {
	at := len(a.b)
	a.b = binary.NativeEndian.AppendUint16(a.b, 0)
	a.b = binary.NativeEndian.AppendUint16(a.b, typ|nlaNested)
	return at
}

func (a *attrBuf) end(at int) {
	binary.NativeEndian.PutUint16(a.b[at:], uint16(len(a.b)-at))
}
