package reconciler

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// A Service's problems reach its owner as Warning Events, posted by every
// node, and the Service's content is any namespace user's: what is said
// is capped in size, and each reason is said once per object (its UID and
// generation), in one message naming its first few problems and counting
// the rest, not at each re-translation (an EndpointSlice change, a Node
// update, a retry) nor once per address or frontend.

// maxEventMessage caps the message of every Event the agent posts, and of
// the log line beside it: 1 KiB is what the events.k8s.io API accepts as an
// Event's note, and a longer message costs every node's API calls and
// every reader's memory.
const maxEventMessage = 1024

// maxNamed is how many problems of one reason a message names.
const maxNamed = 5

// capMessage cuts a message to maxEventMessage bytes.
func capMessage(msg string) string { return cutMessage(msg, maxEventMessage) }

// cutMessage cuts a message to limit bytes, on a rune boundary, ending
// with how long it was.
func cutMessage(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	const room = 32 // for the "... (N bytes)" suffix
	n := limit - room
	for n > 0 && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n] + "... (" + strconv.Itoa(len(msg)) + " bytes)"
}

// joinProblems is the one message of a reason's problems: the first
// maxNamed that fit in maxEventMessage named, the rest counted.
func joinProblems(msgs []string) string {
	const room = 32 // for the "; and N more" suffix
	var b strings.Builder
	named := 0
	for _, m := range msgs[:min(len(msgs), maxNamed)] {
		if named == 0 {
			b.WriteString(cutMessage(m, maxEventMessage-room))
		} else if b.Len()+2+len(m) <= maxEventMessage-room {
			b.WriteString("; " + m)
		} else {
			break
		}
		named++
	}
	if more := len(msgs) - named; more > 0 {
		b.WriteString("; and " + strconv.Itoa(more) + " more")
	}
	return b.String()
}

// problems gathers what is to be said of one object, by reason, in the
// order the reasons first come.
type problems struct {
	reasons []string
	msgs    map[string][]string
}

func (ps *problems) add(reason, msg string) {
	if ps.msgs == nil {
		ps.msgs = map[string][]string{}
	}
	if _, ok := ps.msgs[reason]; !ok {
		ps.reasons = append(ps.reasons, reason)
	}
	ps.msgs[reason] = append(ps.msgs[reason], msg)
}

// told is what a Service object (its UID and generation) was told.
type told struct {
	uid        types.UID
	generation int64
	// translation is the reasons its latest translation found: one still
	// there is not said again, one gone and back is. others are the
	// reasons said of it from elsewhere (a frontend lost to another
	// Service, a refused frontend), each said once for the object.
	translation, others map[string]struct{}
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
		t = &told{uid: uid, generation: gen, translation: map[string]struct{}{}, others: map[string]struct{}{}}
		r.told[name] = t
	}
	return t
}

// sayTranslation reports the reasons a translation of svc found wrong
// and its previous translation of the same object did not, one Event
// each, and remembers them.
func (r *Reconciler) sayTranslation(name model.ServiceName, svc *corev1.Service, res translate.Result) {
	if svc == nil {
		delete(r.told, name)
		return
	}
	t := r.toldOf(name, svc)
	if res.Err == nil && len(res.Warnings) == 0 && len(t.translation) == 0 {
		return
	}
	var ps problems
	if res.Err != nil {
		ps.add("InvalidService", res.Err.Error())
	}
	for _, w := range res.Warnings {
		ps.add(warningReason(w), w.Error())
	}
	now := make(map[string]struct{}, len(ps.reasons))
	for _, reason := range ps.reasons {
		now[reason] = struct{}{}
		if _, said := t.translation[reason]; !said {
			r.warn(name, reason, errors.New(joinProblems(ps.msgs[reason])))
		}
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
// per reason for its current object.
func (r *Reconciler) sayOnce(name model.ServiceName, reason string, err error) {
	svc, _ := r.opt.Store.Service(name)
	if svc == nil { // gone: nothing to remember it by
		r.warn(name, reason, err)
		return
	}
	t := r.toldOf(name, svc)
	if _, said := t.others[reason]; said {
		r.log.Log(logv.V(logv.Sync), "service problem already reported", zap.Stringer("service", name), zap.String("reason", reason))
		return
	}
	t.others[reason] = struct{}{}
	r.warn(name, reason, err)
}
