package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	namespace   = "default"
	triggerTime = "endpoints.kubernetes.io/last-change-trigger-time"
	writers     = 32
)

// cluster writes the objects the agent lists, shaped as the controllers
// and kubelets of a real cluster write them (selectors, pod references,
// node names, zones, node images), and keeps what it wrote: it is the
// only writer, so updates need no read first.
type cluster struct {
	cs        kubernetes.Interface
	eps       int
	nodes     int // Nodes the endpoints are spread over
	mu        sync.Mutex
	services  []*corev1.Service
	slices    []*discoveryv1.EndpointSlice
	nextFresh int
	nextSvc   int
	nextSlice int
	nextNode  int
}

func svcName(i int) string  { return fmt.Sprintf("svc-%05d", i) }
func nodeName(k int) string { return fmt.Sprintf("node-%04d", k) }

// addr is the n-th address from base, n < 2^22.
func addr(base netip.Addr, n int) string {
	b := base.As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(n)
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b).String()
}

var (
	endpointBase = netip.MustParseAddr("10.64.0.1")
	freshBase    = netip.MustParseAddr("10.128.0.1")
)

// grow creates Services and their slices up to n (the first call also the
// Nodes), 32 writers at once. Objects that exist are taken as they are, so
// a run can start from a server some of them are in.
func (c *cluster) grow(ctx context.Context, n int) error {
	if len(c.services) == 0 && c.nodes > 0 {
		if err := parallel(c.nodes, writers, func(k int) error { return c.createNode(ctx, k) }); err != nil {
			return err
		}
	}
	from := len(c.services)
	if n <= from {
		return nil
	}
	c.services = append(c.services, make([]*corev1.Service, n-from)...)
	c.slices = append(c.slices, make([]*discoveryv1.EndpointSlice, n-from)...)
	return parallel(n-from, writers, func(k int) error {
		i := from + k
		svc, err := c.cs.CoreV1().Services(namespace).Create(ctx, service(i), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			svc, err = c.cs.CoreV1().Services(namespace).Get(ctx, svcName(i), metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("create Service %s: %w", svcName(i), err)
		}
		sl, err := c.cs.DiscoveryV1().EndpointSlices(namespace).Create(ctx, c.slice(i), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			sl, err = c.cs.DiscoveryV1().EndpointSlices(namespace).Get(ctx, svcName(i)+"-x7k2p", metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("create EndpointSlice of %s: %w", svcName(i), err)
		}
		c.mu.Lock()
		c.services[i], c.slices[i] = svc, sl
		c.mu.Unlock()
		return nil
	})
}

func service(i int) *corev1.Service {
	name := svcName(i)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": name}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP,
				Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func (c *cluster) slice(i int) *discoveryv1.EndpointSlice {
	name := svcName(i)
	proto, port, pname := corev1.ProtocolTCP, int32(8080), "http"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-x7k2p", Namespace: namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: name,
				discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
				"app":                        name,
			},
			Annotations: map[string]string{triggerTime: time.Now().UTC().Format(time.RFC3339)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Protocol: &proto, Port: &port}},
	}
	for j := 0; j < c.eps; j++ {
		s.Endpoints = append(s.Endpoints, c.endpoint(i, j, addr(endpointBase, i*c.eps+j)))
	}
	return s
}

// endpoint is endpoint j of Service i as the EndpointSlice controller
// writes it for a ready pod.
func (c *cluster) endpoint(i, j int, ip string) discoveryv1.Endpoint {
	ready, serving, terminating := true, true, false
	k := (i*c.eps + j) % max(c.nodes, 1)
	node, zone := nodeName(k), fmt.Sprintf("zone-%c", 'a'+k%3)
	pod := fmt.Sprintf("%s-%s", svcName(i), ip)
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		NodeName:   &node,
		Zone:       &zone,
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: pod,
			UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i*c.eps+j))},
	}
}

// createNode writes a Node as a kubelet does: addresses, capacity,
// conditions, system info and the 50 images it reports by default.
func (c *cluster) createNode(ctx context.Context, k int) error {
	name := nodeName(k)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+k%3), "node.kubernetes.io/instance-type": "m5.xlarge",
		}},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 32+k/256, k%256)},
	}
	n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
	n, err := c.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create Node %s: %w", name, err)
	}
	now := metav1.Now()
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
	n.Status = corev1.NodeStatus{
		Capacity: res, Allocatable: res,
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr(netip.MustParseAddr("192.168.0.1"), k)},
			{Type: corev1.NodeHostName, Address: name}},
		NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", k), KernelVersion: "6.1.0-48-cloud-amd64",
			OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.7.24",
			KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64"},
	}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeReady} {
		st := corev1.ConditionFalse
		if t == corev1.NodeReady {
			st = corev1.ConditionTrue
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: st,
			LastHeartbeatTime: now, LastTransitionTime: now, Reason: "Kubelet" + string(t), Message: "kubelet reports " + string(t)})
	}
	for m := 0; m < 50; m++ {
		img := fmt.Sprintf("registry.example.com/team-%d/app-%d", m%7, m)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", img, m), img + ":v1." + fmt.Sprint(m)},
			SizeBytes: int64(10_000_000 + m*1_000_000)})
	}
	if _, err := c.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("set Node %s status: %w", name, err)
	}
	return nil
}

// changeSlices replaces one endpoint in each of k slices (k distinct
// Services, as a rolling update moves one pod), 8 writers at once.
func (c *cluster) changeSlices(ctx context.Context, k int) error {
	next := make([]*discoveryv1.EndpointSlice, k)
	idx := make([]int, k)
	c.mu.Lock()
	for m := range next {
		i := (c.nextSlice * 7919) % len(c.slices)
		c.nextSlice++
		s := c.slices[i].DeepCopy()
		pos := c.nextSlice % len(s.Endpoints)
		s.Endpoints[pos] = c.endpoint(i, pos, addr(freshBase, c.nextFresh))
		c.nextFresh++
		s.Annotations[triggerTime] = time.Now().UTC().Format(time.RFC3339)
		next[m], idx[m] = s, i
	}
	c.mu.Unlock()
	return parallel(k, 8, func(m int) error {
		got, err := c.cs.DiscoveryV1().EndpointSlices(namespace).Update(ctx, next[m], metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update EndpointSlice %s: %w", next[m].Name, err)
		}
		c.mu.Lock()
		c.slices[idx[m]] = got
		c.mu.Unlock()
		return nil
	})
}

// changeServices moves the target port of k Services (distinct), 8
// writers at once.
func (c *cluster) changeServices(ctx context.Context, k int) error {
	next := make([]*corev1.Service, k)
	idx := make([]int, k)
	c.mu.Lock()
	for m := range next {
		i := (c.nextSvc * 7919) % len(c.services)
		c.nextSvc++
		s := c.services[i].DeepCopy()
		tp := s.Spec.Ports[0].TargetPort.IntVal
		s.Spec.Ports[0].TargetPort = intstr.FromInt32(8080 + (tp-8079)%2)
		next[m], idx[m] = s, i
	}
	c.mu.Unlock()
	return parallel(k, 8, func(m int) error {
		got, err := c.cs.CoreV1().Services(namespace).Update(ctx, next[m], metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update Service %s: %w", next[m].Name, err)
		}
		c.mu.Lock()
		c.services[idx[m]] = got
		c.mu.Unlock()
		return nil
	})
}

// parallel runs f(0..n-1) on w workers and returns the first error.
func parallel(n, w int, f func(i int) error) error {
	idx := make(chan int)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		idx <- i
	}
	close(idx)
	wg.Wait()
	return first
}

// changeNodes writes k kubelet heartbeats (the Ready condition's
// heartbeat time, as a kubelet's status report every 5 minutes does) to k
// distinct Nodes, 8 writers at once.
func (c *cluster) changeNodes(ctx context.Context, k int) error {
	if c.nodes == 0 {
		return nil
	}
	c.mu.Lock()
	first := c.nextNode
	c.nextNode += k
	c.mu.Unlock()
	return parallel(k, 8, func(m int) error {
		name := nodeName((first + m) % c.nodes)
		n, err := c.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read Node %s: %w", name, err)
		}
		now := metav1.Now()
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime = now
		}
		if _, err := c.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Node %s status: %w", name, err)
		}
		return nil
	})
}
