//go:build linux

package linux

import (
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

	f := s.f
	err = s.query(ctx, unix.RTM_GETLINK, 0, getLink(1<<30), none)
	if !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("a link that does not exist: got %v, want ENODEV", err)
	}
	if s.f != f {
		t.Fatal("a refusal closed the socket")
	}
	links := 0
	if err := s.query(ctx, unix.RTM_GETLINK, unix.NLM_F_DUMP, getLink(0), func(netlink.Message) error { links++; return nil }); err != nil || links == 0 {
		t.Fatalf("dump the links after a refusal: %d links, %v", links, err)
	}

	short, cancelShort := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancelShort()
	err = s.within(short, func() error { _, err := s.receive(); return err }) // nothing was asked: no answer comes
	if !errors.Is(err, context.DeadlineExceeded) || s.f != nil {
		t.Fatalf("an exchange past its deadline: got %v, socket closed %v", err, s.f == nil)
	}
	if err := s.query(ctx, unix.RTM_GETLINK, 0, getLink(1), none); err != nil {
		t.Fatalf("the loopback link, on a fresh socket: %v", err)
	}
}
