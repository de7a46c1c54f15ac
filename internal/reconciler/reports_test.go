package reconciler

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/translate"
)

// A Service whose scheduler-flags annotation is 256 KiB of unknown flags is
// told so in one Event of at most 1 KiB, however often it is re-translated
// (its slices change, the Node changes); a new generation, or a problem
// gone and back, is told again.
func TestHostileAnnotationToldOncePerGeneration(t *testing.T) {
	r := newRig(t)
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.UID, web.Generation = "uid-web", 1
	web.Annotations = map[string]string{translate.AnnotationSchedulerFlags: strings.Repeat("x,", 128*1024)}
	r.store.SetService(web)
	r.sync(false)
	for i := range 50 {
		eps := []endpoint{ready("10.244.1.2")}
		if i%2 == 0 {
			eps = append(eps, ready("10.244.1.3"))
		}
		r.store.SetSlice(slice("web", corev1.ProtocolTCP, 80, eps...))
		r.store.SetService(web)
		r.sync(false)
	}
	if n := len(r.warn.warnings); n != 1 {
		t.Fatalf("%d Events after 51 translations of one generation, want 1: %.200q", n, r.warn.warnings)
	}
	ev := r.warn.warnings[0]
	if !strings.HasPrefix(ev, "default/web InvalidService: ") || !strings.Contains(ev, "unknown flag") {
		t.Fatalf("Event %.300q, want InvalidService naming the flag", ev)
	}
	if msg := strings.TrimPrefix(ev, "default/web InvalidService: "); len(msg) > maxEventMessage {
		t.Fatalf("Event message is %d bytes, want at most %d", len(msg), maxEventMessage)
	}

	gen2 := web.DeepCopy()
	gen2.Generation = 2
	r.store.SetService(gen2)
	r.sync(false)
	if n := len(r.warn.warnings); n != 2 {
		t.Fatalf("%d Events after a new generation, want 2", n)
	}

	fixed := gen2.DeepCopy()
	delete(fixed.Annotations, translate.AnnotationSchedulerFlags)
	r.store.SetService(fixed)
	r.sync(false)
	r.store.SetService(gen2)
	r.sync(false)
	if n := len(r.warn.warnings); n != 3 {
		t.Fatalf("%d Events after the problem went and came back, want 3", n)
	}
}

// Every Event message, whoever reports it, is at most 1 KiB, and says how
// long it was.
func TestEventMessagesCapped(t *testing.T) {
	r := newRig(t)
	for _, size := range []int{10, maxEventMessage, maxEventMessage + 1, 9 << 20} {
		r.warn.warnings = nil
		r.rec.warn(model.ServiceName{Namespace: "default", Name: "web"}, "Reason", errors.New(strings.Repeat("é", size/2)+strings.Repeat("a", size%2)))
		msg := strings.TrimPrefix(r.warn.warnings[0], "default/web Reason: ")
		if len(msg) > maxEventMessage {
			t.Errorf("a %d-byte message was posted as %d bytes, want at most %d", size, len(msg), maxEventMessage)
		}
		if size > maxEventMessage && !strings.HasSuffix(msg, " bytes)") {
			t.Errorf("a %d-byte message was cut without saying so: ...%q", size, msg[len(msg)-40:])
		}
		if !utf8.ValidString(msg) {
			t.Errorf("a %d-byte message was cut inside a rune", size)
		}
	}
}

// A Service listing 2,000 external IPs on the pod network and 2,000
// outside --external-ip-cidrs is told so in one Event per reason, each at
// most 1 KiB, beside as many log lines, however often it is re-translated;
// a new generation with other such addresses is told again.
func TestManyRefusedAddressesToldOncePerReason(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	r := newRigWith(t, func(o *Options) {
		o.Log = zap.New(core)
		o.ReservedCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
		o.Translate.ExternalIPCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	})
	externalIPs := func(first int) []string {
		var ips []string
		for i := range 2000 {
			ips = append(ips, fmt.Sprintf("10.244.%d.%d", first+i/250, i%250), fmt.Sprintf("198.51.%d.%d", first+i/250, i%250))
		}
		return ips
	}
	web := service("web", "10.96.0.10", corev1.ProtocolTCP, 80)
	web.UID, web.Generation = "uid-web", 1
	web.Spec.ExternalIPs = externalIPs(100)
	r.store.SetService(web)
	for i := range 10 {
		eps := []endpoint{ready("10.244.1.2")}
		if i%2 == 0 {
			eps = append(eps, ready("10.244.1.3"))
		}
		r.store.SetSlice(slice("web", corev1.ProtocolTCP, 80, eps...))
		r.sync(false)
	}
	check := func(want map[string]int) {
		t.Helper()
		got := map[string]int{}
		for _, ev := range r.warn.warnings {
			reason, msg, _ := strings.Cut(strings.TrimPrefix(ev, "default/web "), ": ")
			got[reason]++
			if len(msg) > maxEventMessage {
				t.Errorf("a %s Event of %d bytes, want at most %d", reason, len(msg), maxEventMessage)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("Events by reason %v, want %v", got, want)
		}
		if n := logs.Len(); n != len(r.warn.warnings) {
			t.Errorf("%d warning log lines for %d Events", n, len(r.warn.warnings))
		}
		for _, l := range logs.All() {
			if n := len(l.ContextMap()["error"].(string)); n > maxEventMessage {
				t.Errorf("a log line of %d bytes", n)
			}
		}
	}
	check(map[string]int{"InvalidServiceField": 1, "ReservedAddress": 1})

	gen2 := web.DeepCopy()
	gen2.Generation = 2
	gen2.Spec.ExternalIPs = externalIPs(200)
	r.store.SetService(gen2)
	r.sync(false)
	r.sync(false)
	check(map[string]int{"InvalidServiceField": 2, "ReservedAddress": 2})
}
