package source

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
)

// lbService is a valid LoadBalancer Service with Local policy; edit
// replaces one line of it to make a case.
const lbService = `apiVersion: v1
kind: Service
metadata:
  name: lb
  annotations: {}
spec:
  type: LoadBalancer
  clusterIPs: [10.96.0.20, "fd00:96::20"]
  externalIPs: [192.0.2.30]
  externalTrafficPolicy: Local
  healthCheckNodePort: 32000
  loadBalancerSourceRanges: [198.51.100.0/24]
  ports:
  - {name: http, port: 80, nodePort: 30080}
  - {name: dns, port: 53, protocol: UDP, nodePort: 30053}
status:
  loadBalancer:
    ingress: [{ip: 192.0.2.10, ipMode: VIP}]
`

const goodSlice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: lb-1
  labels: {kubernetes.io/service-name: lb}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.244.1.2]
  nodeName: node-a
`

func edit(doc, old, new string) string {
	if !strings.Contains(doc, old) {
		panic(fmt.Sprintf("%q not in the document", old))
	}
	return strings.Replace(doc, old, new, 1)
}

// TestValidationRefusesWhatTheAPIServerRefuses: each case is one field the
// API server (or its NodePort allocator) refuses; the problem names the
// file, the document and the field.
func TestValidationRefusesWhatTheAPIServerRefuses(t *testing.T) {
	mega := strings.Repeat("a", 1<<20)
	tests := []struct {
		name, doc string
		want      string // field path and reason, a part of the problem
	}{
		{"zoned ClusterIP", edit(lbService, `"fd00:96::20"`, `"fe80::1%eth0"`), `spec.clusterIPs[1]: "fe80::1%eth0" has a zone`},
		{"zoned external IP", edit(lbService, "[192.0.2.30]", `["fd00::1%eth0"]`), `spec.externalIPs[0]: "fd00::1%eth0" has a zone`},
		{"loopback ClusterIP", edit(lbService, "10.96.0.20,", "127.0.0.1,"), "spec.clusterIPs[0]: 127.0.0.1 may not be in the loopback range"},
		{"loopback IPv6 external IP", edit(lbService, "[192.0.2.30]", `["::1"]`), "spec.externalIPs[0]: ::1 may not be in the loopback range"},
		{"unspecified external IP", edit(lbService, "[192.0.2.30]", "[0.0.0.0]"), "spec.externalIPs[0]: 0.0.0.0 may not be unspecified"},
		{"multicast external IP", edit(lbService, "[192.0.2.30]", "[239.1.2.3]"), "spec.externalIPs[0]: 239.1.2.3 may not be multicast"},
		{"link-local ingress", edit(lbService, "ip: 192.0.2.10", "ip: 169.254.169.254"), "status.loadBalancer.ingress[0].ip: 169.254.169.254 may not be in the link-local range"},
		{"link-local IPv6 ClusterIP", edit(lbService, `"fd00:96::20"`, `"fe80::20"`), "spec.clusterIPs[1]: fe80::20 may not be in the link-local range"},
		{"leading-zero IPv4", edit(lbService, "[192.0.2.30]", "[192.0.2.030]"), `spec.externalIPs[0]: not an IP address: "192.0.2.030"`},
		{"IPv4-mapped IPv6", edit(lbService, "[192.0.2.30]", `["::ffff:192.0.2.30"]`), "spec.externalIPs[0]: \"::ffff:192.0.2.30\" is an IPv4-mapped IPv6 address"},
		{"duplicate port and protocol", edit(lbService, "{name: dns, port: 53, protocol: UDP, nodePort: 30053}", "{name: dns, port: 80, protocol: TCP, nodePort: 30053}"),
			"spec.ports[1]: duplicate port 80/TCP (spec.ports[0])"},
		{"duplicate nodePort and protocol", edit(lbService, "protocol: UDP, nodePort: 30053", "protocol: TCP, nodePort: 30080"),
			"spec.ports[1].nodePort: duplicate nodePort 30080/TCP (spec.ports[0])"},
		{"healthCheckNodePort 22", edit(lbService, "healthCheckNodePort: 32000", "healthCheckNodePort: 22"),
			"spec.healthCheckNodePort: 22 is outside the NodePort range 30000-32767"},
		{"healthCheckNodePort on a Cluster policy", edit(lbService, "externalTrafficPolicy: Local", "externalTrafficPolicy: Cluster"),
			"spec.healthCheckNodePort: may only be set when type is LoadBalancer and externalTrafficPolicy is Local"},
		{"healthCheckNodePort equal to a nodePort", edit(lbService, "healthCheckNodePort: 32000", "healthCheckNodePort: 30080"),
			"spec.healthCheckNodePort: 30080 is also spec.ports[0].nodePort"},
		{"nodePort outside the range", edit(lbService, "nodePort: 30080", "nodePort: 8080"), "spec.ports[0].nodePort: 8080 is outside the NodePort range"},
		{"nodePort on a ClusterIP", edit(edit(edit(edit(lbService, "type: LoadBalancer", "type: ClusterIP"), "  externalTrafficPolicy: Local\n", ""),
			"  healthCheckNodePort: 32000\n", ""), "  loadBalancerSourceRanges: [198.51.100.0/24]\n", ""),
			"spec.ports[0].nodePort: may not be used when type is ClusterIP"},
		{"megabyte name", edit(lbService, "name: lb", "name: "+mega), "metadata.name: Invalid value: must be no more than 63 characters"},
		{"megabyte annotation", edit(lbService, "annotations: {}", "annotations: {x: "+mega+"}"), "metadata.annotations: Too long: may not be more than 262144 bytes"},
		{"port name not a DNS label", edit(lbService, "name: http", "name: HTTP_1"), "spec.ports[0].name: a lowercase RFC 1123 label"},
		{"source range with host bits", edit(lbService, "[198.51.100.0/24]", "[198.51.100.7/24]"), "spec.loadBalancerSourceRanges[0]: \"198.51.100.7/24\" has bits set past the prefix length"},
		{"source range leading zero", edit(lbService, "[198.51.100.0/24]", "[010.0.0.0/8]"), `spec.loadBalancerSourceRanges[0]: not a CIDR: "010.0.0.0/8"`},
		{"source-range annotation", edit(edit(lbService, "  loadBalancerSourceRanges: [198.51.100.0/24]\n", ""), "annotations: {}",
			`annotations: {service.beta.kubernetes.io/load-balancer-source-ranges: "198.51.100.0/24,nope"}`),
			`metadata.annotations[service.beta.kubernetes.io/load-balancer-source-ranges][1]: not a CIDR: "nope"`},
		{"ingress on a NodePort Service", edit(edit(lbService, "type: LoadBalancer", "type: NodePort"), "  healthCheckNodePort: 32000\n", ""),
			"status.loadBalancer.ingress: may only be used when spec.type is LoadBalancer"},
		{"bad ipMode", edit(lbService, "ipMode: VIP", "ipMode: Tunnel"), `status.loadBalancer.ingress[0].ipMode: must be VIP or Proxy, got "Tunnel"`},
		{"ipFamilies against clusterIPs", edit(lbService, "  type: LoadBalancer\n", "  type: LoadBalancer\n  ipFamilies: [IPv6, IPv4]\n"),
			"spec.ipFamilies[0]: must be IPv4, the family of spec.clusterIPs[0]"},
		{"loopback endpoint", goodSlice + "- addresses: [127.0.0.1]\n", "endpoints[1].addresses[0]: 127.0.0.1 may not be in the loopback range"},
		{"link-local endpoint", edit(goodSlice, "10.244.1.2", "169.254.1.1"), "endpoints[0].addresses[0]: 169.254.1.1 may not be in the link-local range"},
		{"multicast endpoint", edit(goodSlice, "10.244.1.2", "224.0.0.1"), "endpoints[0].addresses[0]: 224.0.0.1 may not be multicast"},
		{"unspecified endpoint", edit(goodSlice, "10.244.1.2", "0.0.0.0"), "endpoints[0].addresses[0]: 0.0.0.0 may not be unspecified"},
		{"zoned endpoint", edit(edit(goodSlice, "IPv4", "IPv6"), "10.244.1.2", `"fd00::2%eth0"`), `endpoints[0].addresses[0]: "fd00::2%eth0" has a zone`},
		{"non-canonical IPv6 endpoint", edit(edit(goodSlice, "IPv4", "IPv6"), "10.244.1.2", `"FD00:0::2"`), `endpoints[0].addresses[0]: "FD00:0::2" must be in canonical form ("fd00::2")`},
		{"megabyte slice name", edit(goodSlice, "name: lb-1", "name: "+mega), "metadata.name: Invalid value: must be no more than 253 characters"},
		{"megabyte node name on an endpoint", edit(goodSlice, "nodeName: node-a", "nodeName: "+mega), "endpoints[0].nodeName: must be no more than 253 characters"},
		{"too many endpoints", goodSlice + strings.Repeat("- addresses: [10.244.1.3]\n", maxSliceEndpoints), "endpoints: at most 1000, got 1001"},
		{"zoned node address", nodeYAML("n1", "fe80::1%eth0"), `status.addresses[0].address: "fe80::1%eth0" has a zone`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, problems := parseFile("dir/f.yaml", []byte("# first\n---\n"+tt.doc), rules{nodePorts: model.PortRange{First: 30000, Last: 32767}})
			if len(problems) != 1 || len(objs) != 0 {
				t.Fatalf("%d objects, problems %v; want one problem", len(objs), problems)
			}
			msg := problems[0].Error()
			if !strings.HasPrefix(msg, "dir/f.yaml: document 1 (") || !strings.Contains(msg, tt.want) {
				t.Errorf("problem:\n%.600s\nwant the file, the document and:\n%s", msg, tt.want)
			}
			if len(msg) > 4096 {
				t.Errorf("problem is %d bytes long: values must be cut", len(msg))
			}
		})
	}
}

// TestValidationAcceptsValidObjects: the bases of the cases above are
// valid, so each case fails for its one edit only.
func TestValidationAcceptsValidObjects(t *testing.T) {
	for name, doc := range map[string]string{
		"lb":               lbService,
		"slice":            goodSlice,
		"IPv6 slice":       edit(edit(goodSlice, "IPv4", "IPv6"), "10.244.1.2", `"fd00::2"`),
		"same port, UDP":   edit(lbService, "{name: dns, port: 53, protocol: UDP, nodePort: 30053}", "{name: dns, port: 80, protocol: UDP, nodePort: 30080}"),
		"allow-all ranges": edit(lbService, "[198.51.100.0/24]", `["0.0.0.0/0", " ::/0 "]`),
		"headless":         "apiVersion: v1\nkind: Service\nmetadata: {name: h}\nspec: {clusterIP: None}\n",
		"node":             nodeYAML("n1", "192.0.2.1"),
	} {
		objs, problems := parseFile("f.yaml", []byte(doc), rules{nodePorts: model.PortRange{First: 30000, Last: 32767}})
		if len(problems) > 0 || len(objs) != 1 {
			t.Errorf("%s: %d objects, problems %v", name, len(objs), problems)
		}
	}
}

func TestFieldErrorsCapped(t *testing.T) {
	var errs fieldErrors
	for i := range 25 {
		errs.add(fmt.Sprintf("x[%d]", i), "bad")
	}
	msg := errs.err().Error()
	if !strings.HasSuffix(msg, "x[9]: bad; and 15 more") || strings.Contains(msg, "x[10]") {
		t.Errorf("message %q", msg)
	}
}
