package rescan

import (
	"sync"

	"github.com/kube-ipvs/kube-ipvs/internal/dataplane"
)

// heard gathers the kernel's announcements until the checker reads what
// they name: add never blocks (the notifier's receive must keep up with
// the kernel), and a burst is one cue.
type heard struct {
	mu  sync.Mutex
	ev  dataplane.Event
	cue chan struct{}
}

func newHeard() *heard { return &heard{cue: make(chan struct{}, 1)} }

// add records an announcement and cues the checker.
func (h *heard) add(ev dataplane.Event) {
	h.mu.Lock()
	h.ev |= ev
	h.mu.Unlock()
	select {
	case h.cue <- struct{}{}:
	default:
	}
}

// forget forgets what of ev was announced, and keeps the rest.
func (h *heard) forget(ev dataplane.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ev &^= ev
}

// take returns what was announced since the last take, and forgets it.
func (h *heard) take() dataplane.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	ev := h.ev
	h.ev = 0
	return ev
}
