// Package multinode is `make cluster-e2e`: a cluster of several nodes inside
// the one IPVS VM, against the real kube-apiserver on the host.
//
// scripts/cluster-e2e.sh starts etcd and kube-apiserver on the host's
// loopback (scripts/apiserver/run.sh), boots the IPVS VM with the API server
// forwarded to 10.0.2.100 and runs this package's test there, as root. The
// test builds the cluster out of network namespaces: each node is one (its
// own IPVS table, kube-ipvs0, netfilter shim, health-check ports), its pods
// are namespaces behind it on a per-node pod CIDR, the nodes share a bridge
// in the VM's root namespace (the flat "underlay", with routes to each
// other's pod CIDRs as a host-gateway pod network has them), and an
// "outside" namespace on the same bridge is the client and the load
// balancer. Node agents reach the API server through the VM's eth0 (the
// root namespace masquerades them to 10.0.2.15, the only source the
// forwarder answers) under the RBAC identity of manifests/kube-ipvs.yaml;
// kube-proxy runs as system:kube-proxy, bound by the API server's default
// policy as on a kubeadm cluster.
//
// The test itself plays the controllers: it creates the Nodes, Services
// and EndpointSlices through the API, starts and stops the "pods" (the echo
// tool in a namespace), and drives traffic from the outside and from pods.
// See cluster_test.go for the order of the phases. Outside the VM it skips.
package multinode
