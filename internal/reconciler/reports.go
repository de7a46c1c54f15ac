package reconciler

import (
	"errors"
	"hash/fnv"
	"strconv"
	"unicode/utf8"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// A Service's problems reach its owner as Warning Events, posted by every
// node, and the Service's content is any namespace user's: what is said
// is capped in size, and a problem is said once per object, not at each
// re-translation (an EndpointSlice change, a Node update, a retry).

// maxEventMessage caps the message of every Event the agent posts, and of
// the log line beside it: the API server stores Events up to 1 KiB of
// message usefully (kubectl describe shows the start), and a longer one
// costs every node's API calls and every reader's memory.
const maxEventMessage = 1024

// maxToldPerObject bounds what one Service object is told: problems past
// it are logged at debug level only.
const maxToldPerObject = 16

// capMessage cuts a message to maxEventMessage bytes, on a rune boundary,
// ending with how long it was.
func capMessage(msg string) string {
	if len(msg) <= maxEventMessage {
		return msg
	}
	const room = 32 // for the "... (N bytes)" suffix
	n := maxEventMessage - room
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n] + "... (" + strconv.Itoa(len(msg)) + " bytes)"
}

// problem is one thing a Service was told: its reason and message.
type problem struct {
	reason string
	msg    uint64 // FNV-1a of the message as posted
}

func problemOf(reason string, err error) problem {
	h := fnv.New64a()
	_, _ = h.Write([]byte(capMessage(err.Error())))
	return problem{reason: reason, msg: h.Sum64()}
}

// told is what a Service object (its UID and generation) was told.
type told struct {
	uid        types.UID
	generation int64
	// translation is what its latest translation found wrong: a problem
	// still there is not said again, one gone and back is. others are
	// the problems said of it from elsewhere (a frontend lost to another
	// Service), each said once for the object.
	translation, others map[problem]struct{}
}

// toldOf is what the object svc (nil: not known) was told; a new object
// or generation starts afresh.
func (r *Reconciler) toldOf(name model.ServiceName, svc *corev1.Service) *told {
	var uid types.UID
	var gen int64
	if svc != nil {
		uid, gen = svc.UID, svc.Generation
	}
	t := r.told[name]
	if t == nil || t.uid != uid || t.generation != gen {
		t = &told{uid: uid, generation: gen, translation: map[problem]struct{}{}, others: map[problem]struct{}{}}
		r.told[name] = t
	}
	return t
}

// sayTranslation reports what a translation of svc found wrong and its
// previous translation of the same object did not, and remembers it.
func (r *Reconciler) sayTranslation(name model.ServiceName, svc *corev1.Service, res translate.Result) {
	if svc == nil {
		delete(r.told, name)
		return
	}
	t := r.toldOf(name, svc)
	if res.Err == nil && len(res.Warnings) == 0 && len(t.translation) == 0 {
		return
	}
	now := make(map[problem]struct{}, len(res.Warnings)+1)
	say := func(reason string, err error) {
		p := problemOf(reason, err)
		if _, dup := now[p]; dup {
			return
		}
		if len(now) == maxToldPerObject {
			r.log.Debug("service problem not reported: too many", zap.Stringer("service", name), zap.String("reason", reason))
			return
		}
		now[p] = struct{}{}
		if _, said := t.translation[p]; !said {
			r.warn(name, reason, err)
		}
	}
	if res.Err != nil {
		say("InvalidService", res.Err)
	}
	for _, w := range res.Warnings {
		say(warningReason(w), w)
	}
	t.translation = now
}

// warningReason is the Event reason of a translation warning.
func warningReason(w error) string {
	if errors.Is(w, translate.ErrTooManyFrontends) {
		return "TooManyFrontends"
	}
	return "InvalidServiceField"
}

// sayOnce reports a problem found outside the Service's translation once
// for its current object.
func (r *Reconciler) sayOnce(name model.ServiceName, reason string, err error) {
	svc, _ := r.opt.Store.Service(name)
	if svc == nil { // gone: nothing to remember it by
		r.warn(name, reason, err)
		return
	}
	t := r.toldOf(name, svc)
	p := problemOf(reason, err)
	if _, said := t.others[p]; said {
		return
	}
	if len(t.others) == maxToldPerObject {
		r.log.Debug("service problem not reported: too many", zap.Stringer("service", name), zap.String("reason", reason))
		return
	}
	t.others[p] = struct{}{}
	r.warn(name, reason, err)
}
