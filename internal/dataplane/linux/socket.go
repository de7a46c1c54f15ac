//go:build linux

package linux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// socket is the package's one netlink transport: every IPVS, ipset,
// nftables and conntrack request, and every batch of address changes, goes
// out on one (links and the address subscription go through
// vishvananda/netlink). The kernel handles a netlink request while it is
// sent, and each answer of a dump while the one before it is received, so
// an answer is queued before it is read: the socket is non-blocking and
// kept off the runtime's poller, whose thread the kernel would otherwise
// wake for every datagram (ten thousand dumps and more per read of the
// table). Its send and receive are still ordinary system calls, not raw
// ones: either may wait in the kernel for a lock another process holds
// (rtnl, IPVS's mutex), and the runtime must be free to run other
// goroutines meanwhile. When nothing is queued after all (an answer that
// has not come), the call waits in poll(2) in short slices, so that a
// deadline, or the context's cancellation, ends the wait in the caller's
// own goroutine: a call starts no goroutine and leaves none behind.
//
// A socket is not safe for concurrent use. A call that fails in the
// middle of an exchange (its deadline passed, an answer it cannot parse)
// may leave answers queued: the socket closes itself then, and the next
// call opens a fresh one, so no answer is ever read by the wrong request.
type socket struct {
	proto int
	ns    netns.NsHandle // where it is made; not open: the current namespace
	fd    int            // -1: closed, opened again on next use
	seq   uint32
	// strict asks the kernel to check a dump's request strictly, and so
	// to filter the dump by the fields the request sets (rtnetlink's
	// NETLINK_GET_STRICT_CHK).
	strict bool
	// ctx and deadline bound the exchange under way (within).
	ctx      context.Context
	deadline time.Time
	// answered: the exchange under way has read its last answer, so
	// nothing of it is left queued (a refusal leaves the socket usable).
	answered bool
	out      []byte                   // the send being built, reused
	in       []byte                   // receive buffer
	msgs     []syscall.NetlinkMessage // the last receive's, reused
}

// socketBufSize is the receive buffer, recvBatch datagrams of a share
// each. The kernel makes each datagram of a dump as large as the last
// receive offered (netlink_recvmsg keeps it as max_recvmsg_len, up to 32
// KiB), and allocates it whole: a share of 8 KiB holds one service's ten
// destinations, and allocating it costs the kernel a quarter of 32 KiB,
// once per datagram, which the table read makes two of per service.
const socketBufSize = recvBatch * (8 << 10)

// wideBufSize is the receive buffer of a socket for one long dump: 32 KiB
// datagrams, the most netlink makes. The kernel's dump of every IPVS
// service walks the table from its first service again for each datagram
// it fills, so a dump of tens of thousands costs the square of the table
// over the datagram's size: four times larger datagrams, a quarter of it.
const wideBufSize = recvBatch * (32 << 10)

// errDumpInterrupted: the kernel says a dump saw its table change under it
// (NLM_F_DUMP_INTR); what it gave is not one consistent read.
var errDumpInterrupted = errors.New("dump interrupted: the table changed while it was read")

// openSocket opens a netlink socket of proto now, so that a node that
// cannot (no permission, no such family) fails at once.
func openSocket(proto int) (*socket, error) { return openSocketIn(netns.None(), proto) }

// newSocket is a socket of proto in the current namespace, opened on its
// first use.
func newSocket(proto int) *socket { return &socket{proto: proto, ns: netns.None(), fd: -1} }

// newWideSocket is a socket of proto in the current namespace, opened on
// its first use, that receives datagrams of up to 32 KiB (wideBufSize).
func newWideSocket(proto int) *socket {
	s := newSocket(proto)
	s.in = make([]byte, wideBufSize)
	return s
}

// newStrictSocket is a socket of proto in the current namespace, opened on
// its first use, whose dumps the kernel filters by the request's fields.
func newStrictSocket(proto int) *socket {
	s := newSocket(proto)
	s.strict = true
	return s
}

// openSocketIn opens a netlink socket of proto in the network namespace ns
// (netns.None(): the current one). A socket stays in the namespace it was
// made in, so one that closes itself (see socket) is made again there.
func openSocketIn(ns netns.NsHandle, proto int) (*socket, error) {
	s := &socket{proto: proto, ns: ns, fd: -1}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *socket) open() error {
	fd, err := s.newFD()
	if err != nil {
		return fmt.Errorf("open netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("bind netlink socket: %w", err)
	}
	// Error messages without a copy of the request: smaller, so a batch's
	// worst case stays well inside the receive buffer (see batchWindow).
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	if s.strict {
		if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1); err != nil {
			_ = unix.Close(fd)
			return fmt.Errorf("ask for strict checks on a netlink socket: %w", err)
		}
	}
	s.fd = fd
	if s.in == nil {
		s.in = make([]byte, socketBufSize)
	}
	return nil
}

// newFD makes the socket's descriptor, in s.ns when it names one: the
// thread enters the namespace only for the socket(2) call.
func (s *socket) newFD() (int, error) {
	mk := func() (int, error) {
		return unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, s.proto)
	}
	if !s.ns.IsOpen() {
		return mk()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	here, err := netns.Get()
	if err != nil {
		return -1, fmt.Errorf("read the network namespace: %w", err)
	}
	defer here.Close()
	if err := netns.Set(s.ns); err != nil {
		return -1, fmt.Errorf("enter the network namespace: %w", err)
	}
	fd, err := mk()
	if serr := netns.Set(here); serr != nil {
		// This thread is in another namespace for good: let it end with the
		// goroutine rather than run anything else.
		runtime.LockOSThread()
		if err == nil {
			_ = unix.Close(fd)
		}
		return -1, errors.Join(err, fmt.Errorf("leave the network namespace: %w", serr))
	}
	return fd, err
}

// close releases the descriptor; a later call opens a new one.
func (s *socket) close() {
	if s != nil && s.fd >= 0 {
		_ = unix.Close(s.fd)
		s.fd = -1
	}
}

// within runs fn, a whole exchange on s, bounded by ctx: a wait ends when
// ctx's deadline passes or within a slice of its cancellation (see wait).
// When within returns, nothing it started is running.
// A failure before the exchange's last answer was read leaves s closed (see
// socket); the kernel's refusal of a request does not.
func (s *socket) within(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.fd < 0 {
		if err := s.open(); err != nil {
			return err
		}
	}
	s.ctx = ctx
	s.deadline, _ = ctx.Deadline() // zero: none
	s.answered = false
	err := fn()
	s.ctx = nil
	if err == nil {
		return nil
	}
	if s.answered {
		return err
	}
	s.close()
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The socket's deadline is the context's: it may pass a moment
		// before the context says so.
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}

// send writes b, one datagram, to the kernel (an unconnected netlink
// socket's default destination).
func (s *socket) send(b []byte) error {
	err := s.retry(unix.POLLOUT, func() unix.Errno {
		_, _, errno := unix.Syscall(unix.SYS_WRITE, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		return errno
	})
	if err != nil {
		return fmt.Errorf("send netlink request: %w", err)
	}
	return nil
}

// waitSlice is the longest one poll(2) waits before the exchange's context
// is looked at again: how late a cancellation may end a wait.
const waitSlice = 50 * time.Millisecond

// retry runs the non-blocking call until it does not say EAGAIN (or
// EINTR), waiting in poll(2) for events between tries. The wait ends with
// os.ErrDeadlineExceeded when the exchange's deadline passes or its
// context ends.
func (s *socket) retry(events int16, call func() unix.Errno) error {
	for {
		switch errno := call(); errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
		default:
			return errno
		}
		if err := s.wait(events); err != nil {
			return err
		}
	}
}

// wait polls the descriptor for events, at most one slice.
func (s *socket) wait(events int16) error {
	slice := waitSlice
	if !s.deadline.IsZero() {
		slice = min(slice, time.Until(s.deadline))
	}
	if slice <= 0 || (s.ctx != nil && s.ctx.Err() != nil) {
		return os.ErrDeadlineExceeded
	}
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: events}}
	_, err := unix.Poll(fds, int((slice+time.Millisecond-1)/time.Millisecond))
	if err != nil && err != unix.EINTR {
		return fmt.Errorf("poll netlink socket: %w", err)
	}
	return nil
}

// recvBatch is how many datagrams one receive takes at most: a dump of a
// small table answers with its entries, then its end, two datagrams the
// kernel has queued by the time the first is read, and each receive of a
// longer dump makes the kernel queue the next.
const recvBatch = 4

// mmsghdr is struct mmsghdr (recvmmsg(2)).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// receive reads the datagrams of answers queued (at least one, at most
// recvBatch, each up to a share of s.in) and parses them; the messages'
// data alias s.in until the next receive.
func (s *socket) receive() ([]syscall.NetlinkMessage, error) {
	share := len(s.in) / recvBatch
	var iov [recvBatch]unix.Iovec
	var hdrs [recvBatch]mmsghdr
	for i := range recvBatch {
		iov[i].Base = &s.in[i*share]
		iov[i].SetLen(share)
		hdrs[i].hdr.Iov = &iov[i]
		hdrs[i].hdr.SetIovlen(1)
	}
	var got int
	err := s.retry(unix.POLLIN, func() unix.Errno {
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(recvBatch), 0, 0, 0)
		got = int(n)
		return errno
	})
	if err != nil {
		return nil, fmt.Errorf("read netlink answers: %w", err)
	}
	s.msgs = s.msgs[:0]
	for i := range got {
		if hdrs[i].hdr.Flags&unix.MSG_TRUNC != 0 {
			return nil, fmt.Errorf("read netlink answers: a datagram larger than %d bytes", share)
		}
		if s.msgs, err = appendMessages(s.msgs, s.in[i*share:i*share+int(hdrs[i].n)]); err != nil {
			return nil, fmt.Errorf("parse netlink answers: %w", err)
		}
	}
	return s.msgs, nil
}

// appendMessages appends the netlink messages of datagram b to msgs, their
// data aliasing b (what syscall.ParseNetlinkMessage does, without a new
// slice for every datagram: a read of the table receives tens of
// thousands).
func appendMessages(msgs []syscall.NetlinkMessage, b []byte) ([]syscall.NetlinkMessage, error) {
	for len(b) >= unix.NLMSG_HDRLEN {
		h := syscall.NlMsghdr{
			Len:   binary.NativeEndian.Uint32(b[0:4]),
			Type:  binary.NativeEndian.Uint16(b[4:6]),
			Flags: binary.NativeEndian.Uint16(b[6:8]),
			Seq:   binary.NativeEndian.Uint32(b[8:12]),
			Pid:   binary.NativeEndian.Uint32(b[12:16]),
		}
		n := int(h.Len)
		if n < unix.NLMSG_HDRLEN || n > len(b) {
			return msgs, fmt.Errorf("a message of %d bytes in %d", n, len(b))
		}
		msgs = append(msgs, syscall.NetlinkMessage{Header: h, Data: b[unix.NLMSG_HDRLEN:n]})
		b = b[min(len(b), (n+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1)):]
	}
	return msgs, nil
}

// query sends one request (a dump when flags has NLM_F_DUMP) and hands each
// answer to each, its Data valid only during the call, until the dump's
// end or the request's acknowledgement. A refusal is the kernel's errno.
func (s *socket) query(ctx context.Context, typ uint16, flags uint16, data []byte, each func(netlink.Message) error) error {
	return s.within(ctx, func() error {
		s.seq++
		seq := s.seq
		s.out = appendMessage(s.out[:0], typ, flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, data)
		if err := s.send(s.out); err != nil {
			return err
		}
		return s.answersTo(seq, each)
	})
}

// answersTo reads the answers to request seq until its last.
func (s *socket) answersTo(seq uint32, each func(netlink.Message) error) error {
	var interrupted, eachErr error
	for {
		msgs, err := s.receive()
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // nothing else is expected; a stray answer is not ours
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = errDumpInterrupted
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				s.answered = true
				if errno := errnoOf(m.Data); errno != 0 {
					return errno
				}
				return errors.Join(eachErr, interrupted)
			case unix.NLMSG_NOOP:
				continue
			}
			if eachErr == nil { // after an error the rest is read, not decoded
				eachErr = each(netlink.Message{
					Header: netlink.Header{Length: m.Header.Len, Type: netlink.HeaderType(m.Header.Type),
						Flags: netlink.HeaderFlags(m.Header.Flags), Sequence: m.Header.Seq, PID: m.Header.Pid},
					Data: m.Data,
				})
			}
		}
	}
}

// errnoOf reads the error code that starts an NLMSG_ERROR or NLMSG_DONE:
// 0 for an acknowledgement or a dump's clean end.
func errnoOf(data []byte) syscall.Errno {
	if len(data) < 4 {
		return 0
	}
	return syscall.Errno(-int32(binary.NativeEndian.Uint32(data[:4])))
}

// appendMessage appends one netlink message (struct nlmsghdr, then data,
// padded to the 4-byte alignment netlink wants).
func appendMessage(b []byte, typ, flags uint16, seq uint32, data []byte) []byte {
	n := unix.NLMSG_HDRLEN + len(data)
	b = binary.NativeEndian.AppendUint32(b, uint32(n))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // port id: the kernel fills it in
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
