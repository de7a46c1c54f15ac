// Package cluster drives the kube-ipvs agent through a real kube-apiserver.
//
// scripts/cluster-vm.sh (`make cluster-vm`) starts etcd and kube-apiserver
// on this machine's loopback (scripts/apiserver/run.sh) and runs this
// package's test on the host. The test applies the RBAC objects of
// manifests/kube-ipvs.yaml and a Node, boots the IPVS-kernel VM
// (scripts/vm/run.sh) with the API server forwarded into it, and starts the
// agent there as the DaemonSet of that manifest would on a fresh node: its
// args and env, kubeadm's kube-proxy ConfigMap at the volume's mount path,
// the pod's service-account files for the identity those objects bind, and
// KUBERNETES_SERVICE_HOST naming a ClusterIP nothing serves yet. The
// guest prints its `ipvsadm -Sn` table to the console whenever it changes;
// the test reads the console, changes Services and EndpointSlices through
// the API and waits for the kernel to follow.
//
// Without the environment run.sh and cluster-vm.sh set, the test skips.
package cluster
