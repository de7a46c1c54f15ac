package source

import (
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kube-ipvs/kube-ipvs/internal/logv"
	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
)

// EventComponent is the source component of the Events kube-ipvs posts.
const EventComponent = "kube-ipvs"

// EventRecorder reports translation problems on the Service they concern
// (a Warning Event with reason "InvalidService", ...), where the Service's
// owner looks: kubectl describe service. It is the reconciler's Recorder.
type EventRecorder struct {
	rec   record.EventRecorder
	store *objects.Store
}

// NewServiceEventRecorder posts Events through client-go's broadcaster,
// which aggregates repeats and rate-limits them (a problem seen on every
// sync must not flood the API server). It looks the Service up in store,
// so the Event carries its UID: kubectl describe service finds Events by
// UID, and without it the warning only shows in kubectl get events. store
// may be nil. The func stops the broadcaster.
func NewServiceEventRecorder(client kubernetes.Interface, nodeName string, store *objects.Store, log *zap.Logger) (*EventRecorder, func()) {
	if log == nil {
		log = zap.NewNop()
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	b.StartEventWatcher(func(e *corev1.Event) {
		log.Log(logv.V(logv.Sync), "event posted", zap.String("service", e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name),
			zap.String("reason", e.Reason), zap.String("message", e.Message))
	})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent, Host: nodeName})
	return &EventRecorder{rec: rec, store: store}, b.Shutdown
}

// ServiceWarning posts a Warning Event on the named Service.
func (r *EventRecorder) ServiceWarning(name model.ServiceName, reason, message string) {
	if r == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: name.Namespace, Name: name.Name}
	if r.store != nil {
		if svc, _ := r.store.Service(name); svc != nil {
			ref.UID = svc.UID
			ref.ResourceVersion = svc.ResourceVersion
		}
	}
	r.rec.Event(ref, corev1.EventTypeWarning, reason, message)
}
