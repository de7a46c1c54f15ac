package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-ipvs/kube-ipvs/e2e/bench/protocol"
)

const namespace = "default"

// triggerTime is the EndpointSlice annotation kube-proxy's
// network_programming_duration_seconds is measured from.
const triggerTime = "endpoints.kubernetes.io/last-change-trigger-time"

// cluster is the host's copy of what it wrote: it is the only writer, so it
// updates slices without reading them back.
type cluster struct {
	cs     kubernetes.Interface
	n, eps int
	node   string // the VM's node
	// localEvery: one endpoint in localEvery names the VM's node (0: none).
	localEvery int
	mu         sync.Mutex
	slices     []*discoveryv1.EndpointSlice // index: the Service
	replaced   []int                        // per Service: changes so far (the next endpoint to replace)
	nextFresh  int
	nextSvc    int // changes so far: picks the next Service
	stride     int // coprime with n: consecutive changes hit different Services
}

func newCluster(cs kubernetes.Interface, n, eps int, node string, localEvery int) *cluster {
	stride := 7919 // prime
	if n%stride == 0 {
		stride = 1
	}
	return &cluster{cs: cs, n: n, eps: eps, node: node, localEvery: localEvery, slices: make([]*discoveryv1.EndpointSlice, n), replaced: make([]int, n), stride: stride}
}

// fill writes the Node, N Services and N EndpointSlices, 32 writers at once,
// and kubernetes.default's endpoint.
func (c *cluster) fill(ctx context.Context, node, nodeIP string) error {
	if c.n > protocol.MaxServices {
		return fmt.Errorf("N=%d: the address plan holds %d Services", c.n, protocol.MaxServices)
	}
	if c.eps > 16 {
		return fmt.Errorf("%d endpoints per Service: the address plan holds 16", c.eps)
	}
	n, err := c.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node %s: %w", node, err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}
	if _, err := c.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set Node %s addresses: %w", node, err)
	}
	if err := c.kubernetesEndpoint(ctx); err != nil {
		return err
	}
	return parallel(c.n, 32, func(i int) error {
		if _, err := c.cs.CoreV1().Services(namespace).Create(ctx, service(i), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Service %s: %w", protocol.ServiceName(i), err)
		}
		var addrs []string
		for j := 0; j < c.eps; j++ {
			addrs = append(addrs, protocol.Endpoint(i, j).String())
		}
		s := slice(i, addrs)
		for j := range s.Endpoints {
			if c.isLocal(i, j) {
				s.Endpoints[j].NodeName = &c.node
			}
		}
		s, err := c.cs.DiscoveryV1().EndpointSlices(namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create EndpointSlice for %s: %w", protocol.ServiceName(i), err)
		}
		c.mu.Lock()
		c.slices[i] = s
		c.mu.Unlock()
		return nil
	})
}

// setZone sets the VM's Node's topology.kubernetes.io/zone label to zone,
// or removes it when zone is "" (the Node is created without it). A merge
// patch of the labels alone: the Node's addresses stay as they are (a
// change of them makes kube-proxy exit).
func (c *cluster) setZone(ctx context.Context, zone string) error {
	var v any // JSON null: the label removed
	if zone != "" {
		v = zone
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{corev1.LabelTopologyZone: v}}})
	if err != nil {
		return err
	}
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, c.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label Node %s with zone %q: %w", c.node, zone, err)
	}
	return nil
}

// isLocal: endpoint j of Service i names the VM's node.
func (c *cluster) isLocal(i, j int) bool {
	return c.localEvery > 0 && (i*c.eps+j)%c.localEvery == 0
}

// local is every endpoint address that names the VM's node now.
func (c *cluster) local() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.slices {
		for _, e := range s.Endpoints {
			if e.NodeName != nil && *e.NodeName == c.node {
				out = append(out, e.Addresses[0])
			}
		}
	}
	return out
}

// kubernetesEndpoint gives default/kubernetes (made by the API server,
// which the bench runs without its endpoint reconciler) its endpoint: the
// API server as the guest reaches it.
func (c *cluster) kubernetesEndpoint(ctx context.Context) error {
	ready, proto, port, name := true, corev1.ProtocolTCP, int32(protocol.KubernetesTarget), "https"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kubernetes", Namespace: namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{protocol.KubernetesEndpoint},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	if _, err := c.cs.DiscoveryV1().EndpointSlices(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create kubernetes.default's EndpointSlice: %w", err)
	}
	return nil
}

// parallel runs f(0..n-1) on w workers and returns the first error.
func parallel(n, w int, f func(i int) error) error {
	idx := make(chan int)
	errs := make(chan error, w)
	var wg sync.WaitGroup
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
feed:
	for i := 0; i < n; i++ {
		select {
		case idx <- i:
		case first = <-errs:
			break feed
		}
	}
	close(idx)
	wg.Wait()
	if first == nil {
		select {
		case first = <-errs:
		default:
		}
	}
	return first
}

func service(i int) *corev1.Service {
	return benchService(protocol.ServiceName(i), protocol.VIP(i).String())
}

// benchService is a bench Service: ClusterIP vip, TCP protocol.Port to
// protocol.TargetPort, named protocol.PortName.
func benchService(name, vip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			ClusterIP: vip,
			Ports: []corev1.ServicePort{{Name: protocol.PortName, Protocol: corev1.ProtocolTCP,
				Port: protocol.Port, TargetPort: intstr.FromInt32(protocol.TargetPort)}},
		},
	}
}

func slice(i int, addrs []string) *discoveryv1.EndpointSlice {
	ready := true
	s := emptySlice(protocol.ServiceName(i), protocol.ServiceName(i)+"-1")
	s.Annotations = map[string]string{triggerTime: time.Now().UTC().Format(time.RFC3339Nano)}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return s
}

// emptySlice is an IPv4 EndpointSlice of the bench Service svc, named
// name, with its port and no endpoints.
func emptySlice(svc, name string) *discoveryv1.EndpointSlice {
	proto, port, portName := corev1.ProtocolTCP, int32(protocol.TargetPort), protocol.PortName
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
	}
}

// next reserves the next change: which Service, which endpoint goes, which
// comes. The write happens in apply.
func (c *cluster) next(at time.Time) (protocol.Change, *discoveryv1.EndpointSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := (c.nextSvc * c.stride) % c.n
	c.nextSvc++
	cur := c.slices[i]
	pos := c.replaced[i] % len(cur.Endpoints)
	c.replaced[i]++
	fresh := protocol.Fresh(c.nextFresh).String()
	c.nextFresh++
	next := cur.DeepCopy()
	// As the EndpointSlice controller stamps it: kube-proxy observes its
	// network programming latency only for slices that carry it.
	next.Annotations[triggerTime] = at.UTC().Format(time.RFC3339Nano)
	ch := protocol.Change{Index: i, Name: cur.Name, VIP: protocol.VIP(i).String(), Del: next.Endpoints[pos].Addresses[0], Add: fresh}
	next.Endpoints[pos].Addresses = []string{fresh}
	c.slices[i] = next // the next change to this Service builds on this one
	return ch, next
}

// apply writes one reserved change and keeps the stored object current.
func (c *cluster) apply(ctx context.Context, ch protocol.Change, s *discoveryv1.EndpointSlice) error {
	got, err := c.cs.DiscoveryV1().EndpointSlices(namespace).Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update EndpointSlice %s (%s -> %s): %w", ch.Name, ch.Del, ch.Add, err)
	}
	c.mu.Lock()
	c.slices[ch.Index] = got
	c.mu.Unlock()
	return nil
}

// burst reserves k changes (distinct Services) and writes them all at once.
func (c *cluster) burst(ctx context.Context, k int, at time.Time) protocol.Burst {
	type item struct {
		ch protocol.Change
		s  *discoveryv1.EndpointSlice
	}
	items := make([]item, k)
	for i := range items {
		items[i].ch, items[i].s = c.next(at)
	}
	var b protocol.Burst
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for _, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.apply(ctx, it.ch, it.s)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				b.Errors++
				return
			}
			b.Changes = append(b.Changes, it.ch)
		}()
	}
	wg.Wait()
	b.WriteSeconds = time.Since(start).Seconds()
	return b
}
