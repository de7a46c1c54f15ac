package source

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
)

// Kubernetes watches Services, EndpointSlices, this node's Node and every
// Node's addresses through informers and puts them in the Store. Handlers
// do nothing else.
//
// The filters follow kube-proxy's informer selectors: Services without the
// service-proxy-name label (or with ours when ServiceProxyName is set) and
// not headless (spec.clusterIP != None); EndpointSlices without the
// service.kubernetes.io/headless label. Unlike kube-proxy, which lists
// slices with the Services' proxy-name selector, slices are not selected
// by proxy name here: with ServiceProxyName set, slices written by other
// controllers (KEP-4770) need not copy the Service's label, and a slice of
// a Service we do not hold is never translated. Translation drops a slice
// that names another proxy (model.LabelServiceProxyName). The API
// server applies these selectors; the handlers apply them again, so an
// object that stops matching is deleted here even from a watch that does
// not filter (the fake clientset).
type Kubernetes struct {
	Client           kubernetes.Interface
	NodeName         string
	ServiceProxyName string
	Store            *objects.Store
	Log              *zap.Logger
	Resync           time.Duration // informer resync; 0: none
}

// Run starts the informers, marks each source synced once its informer has
// delivered its initial list to the Store, and runs until ctx ends. It
// fails when ctx ends before the caches have synced.
func (k *Kubernetes) Run(ctx context.Context) error {
	svcSel, err := serviceSelector(k.ServiceProxyName)
	if err != nil {
		return err
	}
	sliceSel := sliceSelector()
	svcFactory := informers.NewSharedInformerFactoryWithOptions(k.Client, k.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = svcSel.String()
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
		}))
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(k.Client, k.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sliceSel.String() }))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(k.Client, k.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.NodeName).String()
		}))
	// Every Node, for its addresses and pod CIDRs only (transformNodeAddrs),
	// which no Service may claim: a second informer rather than the first
	// without its selector, so that only this node's Node is kept whole.
	nodesFactory := informers.NewSharedInformerFactoryWithOptions(k.Client, k.Resync)

	h := handlers{store: k.Store, svcSel: svcSel, sliceSel: sliceSel, nodeName: k.NodeName}
	regs := map[string]cache.ResourceEventHandlerRegistration{}
	for _, in := range []struct {
		name      string
		informer  cache.SharedIndexInformer
		handler   cache.ResourceEventHandler
		transform cache.TransformFunc
	}{
		{SourceServices, svcFactory.Core().V1().Services().Informer(), h.services(), transformService},
		{SourceEndpointSlices, sliceFactory.Discovery().V1().EndpointSlices().Informer(), h.slices(), transformSlice},
		{SourceNode, nodeFactory.Core().V1().Nodes().Informer(), h.node(), transformNode},
		{SourceNodes, nodesFactory.Core().V1().Nodes().Informer(), h.nodeAddrs(), transformNodeAddrs},
	} {
		// Before the informer starts: what it caches is trimmed (transform.go).
		if err := in.informer.SetTransform(in.transform); err != nil {
			return fmt.Errorf("set %s transform: %w", in.name, err)
		}
		reg, err := in.informer.AddEventHandler(in.handler)
		if err != nil {
			return fmt.Errorf("add %s handler: %w", in.name, err)
		}
		regs[in.name] = reg
	}
	factories := []informers.SharedInformerFactory{svcFactory, sliceFactory, nodeFactory, nodesFactory}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	defer func() {
		for _, f := range factories {
			f.Shutdown() // waits for the informer goroutines; ctx is done by then
		}
	}()
	for _, name := range SourcesKubernetes {
		// The registration's HasSynced (not the informer's) means our
		// handler has seen the initial list, so the Store holds it.
		if !cache.WaitForCacheSync(ctx.Done(), regs[name].HasSynced) {
			return fmt.Errorf("wait for %s cache to sync: %w", name, context.Cause(ctx))
		}
		k.Store.SetSynced(name)
		k.log().Info("source synced", zap.String("source", name))
	}
	<-ctx.Done()
	return nil
}

func (k *Kubernetes) log() *zap.Logger {
	if k.Log == nil {
		return zap.NewNop()
	}
	return k.Log
}

// serviceSelector is kube-proxy's Service label selector, extended to pick
// the Services that name us when we run as a named service proxy.
func serviceSelector(proxyName string) (labels.Selector, error) {
	var req *labels.Requirement
	var err error
	if proxyName == "" {
		req, err = labels.NewRequirement(model.LabelServiceProxyName, selection.DoesNotExist, nil)
	} else {
		req, err = labels.NewRequirement(model.LabelServiceProxyName, selection.Equals, []string{proxyName})
	}
	if err != nil {
		return nil, fmt.Errorf("service proxy name %q: %w", proxyName, err)
	}
	return labels.NewSelector().Add(*req), nil
}

// sliceSelector skips slices of headless Services: DNS serves those.
func sliceSelector() labels.Selector {
	req, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		// A constant key with DoesNotExist cannot fail validation.
		return labels.Nothing()
	}
	return labels.NewSelector().Add(*req)
}

// handlers puts informer events into the Store, filtering as the list/watch
// selectors do.
type handlers struct {
	store    *objects.Store
	svcSel   labels.Selector
	sliceSel labels.Selector
	nodeName string
}

func (h handlers) wantService(s *corev1.Service) bool {
	return h.svcSel.Matches(labels.Set(s.Labels)) && s.Spec.ClusterIP != corev1.ClusterIPNone
}

func (h handlers) services() cache.ResourceEventHandler {
	set := func(obj any) {
		s, ok := obj.(*corev1.Service)
		if !ok {
			return
		}
		if h.wantService(s) {
			h.store.SetService(s)
		} else {
			// Stopped matching (labelled for another proxy, made headless).
			h.store.DeleteService(model.ServiceName{Namespace: s.Namespace, Name: s.Name})
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(old, obj any) { changed(old, obj, set) },
		DeleteFunc: func(obj any) {
			if s, ok := untombstone(obj).(*corev1.Service); ok {
				h.store.DeleteService(model.ServiceName{Namespace: s.Namespace, Name: s.Name})
			}
		},
	}
}

func (h handlers) slices() cache.ResourceEventHandler {
	set := func(obj any) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		if h.sliceSel.Matches(labels.Set(s.Labels)) {
			h.store.SetSlice(s)
		} else {
			h.store.DeleteSlice(s.Namespace, s.Name)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(old, obj any) { changed(old, obj, set) },
		DeleteFunc: func(obj any) {
			if s, ok := untombstone(obj).(*discoveryv1.EndpointSlice); ok {
				h.store.DeleteSlice(s.Namespace, s.Name)
			}
		},
	}
}

func (h handlers) node() cache.ResourceEventHandler {
	set := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name == h.nodeName {
			h.store.SetNode(n)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(old, obj any) { changed(old, obj, set) },
		DeleteFunc: func(obj any) {
			if n, ok := untombstone(obj).(*corev1.Node); ok && n.Name == h.nodeName {
				h.store.SetNode(nil)
			}
		},
	}
}

// nodeAddrs keeps every Node's addresses and pod CIDRs. The store drops
// what changes neither (a kubelet's status update, most of what a Node's
// watch carries).
func (h handlers) nodeAddrs() cache.ResourceEventHandler {
	set := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			h.store.SetNodeAddrs(n.Name, objects.AddrsOf(n))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(old, obj any) { changed(old, obj, set) },
		DeleteFunc: func(obj any) {
			if n, ok := untombstone(obj).(*corev1.Node); ok {
				h.store.DeleteNodeAddrs(n.Name)
			}
		},
	}
}

// changed calls set unless the update is an informer resync of an object
// that did not change: the reconciler has its own periodic drift check, and a
// resync marking every Service dirty would defeat "cost follows the change".
func changed(old, obj any, set func(any)) {
	o, ok1 := old.(metav1.Object)
	n, ok2 := obj.(metav1.Object)
	if ok1 && ok2 && o.GetResourceVersion() != "" && o.GetResourceVersion() == n.GetResourceVersion() {
		return
	}
	set(obj)
}

// untombstone unwraps the last known state of an object whose delete the
// watch missed.
func untombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}
