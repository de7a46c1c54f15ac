// Package protocol is what bench-guest and bench-host say to each other over
// the VM's forward to the host (HTTP + JSON): the guest asks for a change,
// the host writes it to the API server and answers what the kernel should
// now show. The address plan is here too, so both sides agree on it.
package protocol

import (
	"fmt"
	"net/netip"
)

// Paths the host serves.
const (
	PathPlan   = "/plan"   // GET: Plan
	PathChange = "/change" // POST: one change written, Change back
	PathBurst  = "/burst"  // POST ?count=K: K changes written concurrently, Burst back
	PathResult = "/result" // POST: one result.Tool
	PathGuest  = "/guest"  // POST: Guest
	PathZone   = "/zone"   // POST ?zone=Z: the node's zone label set to Z; no Z: removed
	// PathRoll: POST ?size=S creates a Service of S endpoints to roll,
	// Roll back; DELETE ?name=NAME deletes it and its slices.
	PathRoll = "/roll"
	// PathRollStep: POST ?name=NAME moves its rolling update on by one
	// batch, RollStep back once every write is acknowledged.
	PathRollStep = "/roll/step"
)

// ZoneParam (on PathZone) is the value of the bench node's
// topology.kubernetes.io/zone label, the one topology label kube-proxy
// reads: a change of it makes kube-proxy's nftables mode do a full sync.
// The node is created without it, so a request without it puts the node
// back as it was.
const ZoneParam = "zone"

// TriggerParam (on PathChange and PathBurst) is the guest's clock when it
// asked, RFC 3339: the host stamps it on the EndpointSlices as their
// last-change-trigger-time, so that kube-proxy's network programming
// latency and the guest's are timed on one clock.
const TriggerParam = "trigger"

// Service port: every bench Service is TCP Port -> TargetPort, port name PortName.
const (
	Port       = 80
	TargetPort = 8080
	PortName   = "http"
)

// Plan is the fixed part of the run.
type Plan struct {
	N         int      `json:"n"`
	Endpoints int      `json:"endpoints"` // per Service
	VIPs      []string `json:"vips"`      // index: the Service
	// Local is every endpoint address whose nodeName is the VM's node, as
	// the Services stand now (changes keep an endpoint's nodeName).
	Local []string `json:"local,omitempty"`
}

// Kubernetes is the default/kubernetes Service as the bench's API server
// makes it, and its endpoint as the guest reaches the API server.
const (
	KubernetesVIP      = "10.96.0.1"
	KubernetesPort     = 443
	KubernetesEndpoint = "10.0.2.100" // the VM's forward to the host
	KubernetesTarget   = 6443
)

// Change is one EndpointSlice write: in Service Index, Del replaced by Add.
type Change struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	VIP   string `json:"vip"`
	Add   string `json:"add"`
	Del   string `json:"del"`
}

// Burst is a set of changes written concurrently.
type Burst struct {
	Changes      []Change `json:"changes"`
	WriteSeconds float64  `json:"write_s"` // first write sent to last acknowledged
	Errors       int      `json:"errors"`  // writes the API server refused
}

// Guest is what the guest knows about itself.
type Guest struct {
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	MemMB  int    `json:"mem_mb"`
	Notes  string `json:"notes,omitempty"`
}

// ServiceName of Service i.
func ServiceName(i int) string { return fmt.Sprintf("bench-%05d", i) }

var (
	vipBase   = netip.MustParseAddr("10.96.1.0")  // in the API server's 10.96.0.0/16, clear of 10.96.0.1
	epBase    = netip.MustParseAddr("10.128.0.0") // initial endpoints: 16 per Service
	freshBase = netip.MustParseAddr("10.64.0.0")  // endpoints changes bring in
	// The rolled Services: their VIPs above the N Services', their pods
	// apart from every other endpoint.
	rollVIPBase = netip.MustParseAddr("10.96.255.240")
	rollPodBase = netip.MustParseAddr("10.32.0.0")
)

// MaxServices the address plan holds (the Service CIDR is a /16, its
// last 16 addresses kept for the rolled Services).
const MaxServices = 65535 - 256 - 1 - 16

// Roll is a Service created to be rolled: Size endpoints in slices of
// RollSliceSize, every pod replaced in turn, RollBatch at a time.
type Roll struct {
	Name string `json:"name"`
	VIP  string `json:"vip"`
	Size int    `json:"size"`
}

// RollStep is one batch of a rolling update, as the kernel should now
// show it: Add are new ready pods (weight above 0), Terminating are pods
// that turned terminating (no new connections: weight 0 or gone),
// Removed are the pods that turned terminating the step before and have
// now left their slices (weight 0 or gone).
type RollStep struct {
	Add          []string `json:"add"`
	Terminating  []string `json:"terminating"`
	Removed      []string `json:"removed"`
	WriteSeconds float64  `json:"write_s"` // first slice write sent to the last acknowledged
}

// EndpointChanges is how many endpoints the step changed.
func (s RollStep) EndpointChanges() int { return len(s.Add) + len(s.Terminating) + len(s.Removed) }

// A rolling update as the EndpointSlice controller and a Deployment make
// one: slices of 100 endpoints, pods replaced in batches of 10.
const (
	RollSliceSize = 100
	RollBatch     = 10
	MaxRolls      = 15
)

// RollName of rolled Service k.
func RollName(k int) string { return fmt.Sprintf("bench-roll-%02d", k) }

// RollVIP of rolled Service k (< MaxRolls): the top of the /16, clear of
// the N Services.
func RollVIP(k int) netip.Addr { return add(rollVIPBase, uint32(k)) }

// RollPod is the k-th pod address of the rolled Services (10.32.0.0/11).
func RollPod(k int) netip.Addr { return add(rollPodBase, uint32(k+1)) }

// VIP of Service i.
func VIP(i int) netip.Addr { return add(vipBase, uint32(i)) }

// Endpoint j (< 16) of Service i as created.
func Endpoint(i, j int) netip.Addr { return add(epBase, uint32(i*16+j)) }

// Fresh is the k-th endpoint a change brings in (10.64.0.0/11: apart from the rest).
func Fresh(k int) netip.Addr { return add(freshBase, uint32(k+1)) }

func add(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
