package translate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// Annotations a Service may carry to tune its virtual servers.
const (
	// AnnotationScheduler overrides --scheduler for this Service.
	AnnotationScheduler = "kube-ipvs.io/scheduler"
	// AnnotationSchedulerFlags sets ipvsadm's -b flags: a comma list of
	// sh-fallback, sh-port (scheduler sh) or mh-fallback, mh-port (mh).
	AnnotationSchedulerFlags = "kube-ipvs.io/scheduler-flags"
	// AnnotationDrainTimeout overrides --drain-timeout (a Go duration).
	AnnotationDrainTimeout = "kube-ipvs.io/drain-timeout"
)

// vsOptions are the per-Service settings every virtual server shares.
type vsOptions struct {
	scheduler     model.Scheduler
	schedulerFrom string
	flags         model.Flags
	timeout       uint32
	drainTimeout  time.Duration
}

// serviceOptions reads the scheduler, its flags, session affinity and the
// drain timeout; every bad annotation is reported, not just the first.
func serviceOptions(svc *corev1.Service, cfg Config) (vsOptions, error) {
	o := vsOptions{scheduler: cfg.Scheduler, schedulerFrom: SchedulerFromFlag, drainTimeout: cfg.DrainTimeout}
	var errs []error
	if s, ok := svc.Annotations[AnnotationScheduler]; ok {
		if err := model.Scheduler(s).Validate(); err != nil {
			if len(s) > maxQuoted { // Validate quotes s whole
				err = fmt.Errorf("unknown scheduler %s (want one of %s)", quote(s), model.SchedulerList())
			}
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationScheduler, err))
		} else {
			o.scheduler, o.schedulerFrom = model.Scheduler(s), SchedulerFromAnnotation
		}
	}
	if f, ok := svc.Annotations[AnnotationSchedulerFlags]; ok {
		flags, err := parseSchedulerFlags(f, o.scheduler)
		if err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationSchedulerFlags, err))
		}
		o.flags |= flags
	}
	if d, ok := svc.Annotations[AnnotationDrainTimeout]; ok {
		v, err := time.ParseDuration(d)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationDrainTimeout, bounded(err, d, "a duration")))
		case v < 0:
			errs = append(errs, fmt.Errorf("annotation %s: must not be negative, got %s", AnnotationDrainTimeout, quote(d)))
		default:
			o.drainTimeout = v
		}
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		o.flags |= model.FlagPersistent
		o.timeout = affinityTimeout(svc)
	}
	return o, errors.Join(errs...)
}

// affinityTimeout is the ClientIP affinity timeout in seconds; the API's
// default (3 hours) when the Service does not say.
func affinityTimeout(svc *corev1.Service) uint32 {
	c := svc.Spec.SessionAffinityConfig
	if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil || *c.ClientIP.TimeoutSeconds <= 0 {
		return uint32(corev1.DefaultClientIPServiceAffinitySeconds)
	}
	return uint32(*c.ClientIP.TimeoutSeconds)
}

// parseSchedulerFlags reads "sh-fallback,sh-port" style lists. The kernel
// shares the two flag bits between sh and mh, so a flag is only accepted
// with the scheduler it names: anything else would be silently meaningless.
// The first few bad flags are named, the rest counted (reasons).
func parseSchedulerFlags(list string, scheduler model.Scheduler) (model.Flags, error) {
	var flags model.Flags
	var errs reasons
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		prefix, what, _ := strings.Cut(name, "-")
		var bit model.Flags
		switch what {
		case "fallback":
			bit = model.FlagSchedSH1
		case "port":
			bit = model.FlagSchedSH2
		}
		if bit == 0 || !model.Scheduler(prefix).HashFlags() {
			if !errs.over() {
				errs.add("unknown flag %s (want sh-fallback, sh-port, mh-fallback or mh-port)", quote(name))
			}
			continue
		}
		if model.Scheduler(prefix) != scheduler {
			if !errs.over() {
				errs.add("flag %s needs scheduler %s, not %s", quote(name), prefix, scheduler)
			}
			continue
		}
		flags |= bit
	}
	return flags, errs.err()
}
