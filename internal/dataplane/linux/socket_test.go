//go:build linux

package linux

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// getLink is RTM_GETLINK of the link with index i (struct ifinfomsg).
func getLink(i int32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(i))
	return b
}

// TestSocketRefusalKeepsIt: the kernel's refusal of a request is that
// request's error, and the socket, whose answers were all read, goes on
// being used; an exchange cut short by its deadline closes it, and the next
// exchange opens a fresh one that works.
func TestSocketRefusalKeepsIt(t *testing.T) {
	s, err := openSocket(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("open an rtnetlink socket (every Linux kernel has one): %v", err)
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	none := func(netlink.Message) error { return nil }

	fd := s.fd
	err = s.query(ctx, unix.RTM_GETLINK, 0, getLink(1<<30), none)
	if !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("a link that does not exist: got %v, want ENODEV", err)
	}
	if s.fd != fd {
		t.Fatal("a refusal closed the socket")
	}
	links := 0
	if err := s.query(ctx, unix.RTM_GETLINK, unix.NLM_F_DUMP, getLink(0), func(netlink.Message) error { links++; return nil }); err != nil || links == 0 {
		t.Fatalf("dump the links after a refusal: %d links, %v", links, err)
	}

	short, cancelShort := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancelShort()
	err = s.within(short, func() error { _, err := s.receive(); return err }) // nothing was asked: no answer comes
	if !errors.Is(err, context.DeadlineExceeded) || s.fd >= 0 {
		t.Fatalf("an exchange past its deadline: got %v, socket closed %v", err, s.fd < 0)
	}
	if err := s.query(ctx, unix.RTM_GETLINK, 0, getLink(1), none); err != nil {
		t.Fatalf("the loopback link, on a fresh socket: %v", err)
	}
}

// TestAppendMessagesParsesAsTheStandardLibrary: the receive path's parse
// of a datagram gives what syscall.ParseNetlinkMessage gives, messages and
// refusals alike, and appends to what it is given.
func TestAppendMessagesParsesAsTheStandardLibrary(t *testing.T) {
	three := appendMessage(nil, 16, 2, 7, []byte{1, 2, 3})                  // padded to 20
	three = appendMessage(three, unix.NLMSG_DONE, 2, 7, []byte{0, 0, 0, 0}) // unpadded
	three = appendMessage(three, unix.NLMSG_ERROR, 0, 8, nil)
	short := append([]byte(nil), three[:len(three)-4]...) // the last header cut
	long := append([]byte(nil), three...)
	binary.NativeEndian.PutUint32(long, 1<<20) // a length past the datagram
	for _, tc := range []struct {
		name string
		b    []byte
	}{{"three", three}, {"short", short}, {"long", long}, {"empty", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := syscall.ParseNetlinkMessage(tc.b)
			prior := []syscall.NetlinkMessage{{Header: syscall.NlMsghdr{Seq: 99}}}
			got, err := appendMessages(prior, tc.b)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("error %v, the standard library's %v", err, wantErr)
			}
			if err != nil {
				return
			}
			if len(got) != 1+len(want) || got[0].Header.Seq != 99 {
				t.Fatalf("%d messages after the one given, want %d", len(got)-1, len(want))
			}
			for i, m := range want {
				if got[i+1].Header != m.Header || !bytes.Equal(got[i+1].Data, m.Data) {
					t.Errorf("message %d: %+v %x, want %+v %x", i, got[i+1].Header, got[i+1].Data, m.Header, m.Data)
				}
			}
		})
	}
}
