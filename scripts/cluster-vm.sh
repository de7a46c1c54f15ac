#!/usr/bin/env bash
# cluster-vm.sh: the kube-ipvs agent against a real kube-apiserver, on a real
# IPVS kernel, under the narrow RBAC of manifests/kube-ipvs.yaml.
#
# On this machine: etcd + kube-apiserver on loopback (scripts/apiserver/run.sh,
# binaries built once from the Go module proxy by scripts/apiserver/build.sh).
# The host-side driver (e2e/cluster, a Go test using client-go) applies the
# manifest's ServiceAccount/ClusterRole/ClusterRoleBinding and a Node, checks
# the agent's identity is refused Secrets (and more), boots the VM with the API
# server forwarded to 10.0.2.100:6443 and starts the agent there as the
# manifest's DaemonSet would on a fresh node (its args, kubeadm's kube-proxy
# ConfigMap at the mount path, a service-account token for that identity, an
# empty IPVS table): it must program every Service, the kubernetes one
# included, after which an in-cluster client reaches the API server through
# that ClusterIP (and could not before). It then creates, changes and deletes Services and
# EndpointSlices and waits for the guest's `ipvsadm -Sn` (printed on the
# console when it changes) to follow, checks the Warning Event the agent posts
# for a Service asking for an unknown scheduler, and that the agent's log has
# no "forbidden" and no line in klog's format. Last, kubeadm's tuned config.conf
# and the same settings as flags each run --once from a clean kernel: the
# tables, timeouts, ARP settings and nat rules must be equal. Times are
# printed (API server ready, API change to kernel).
# KUBE_IPVS_CLUSTER_TEST=TestAgentSurvivesAPIServerFaults runs the fault
# scenario instead (API server restarts and watch expiry mid-churn; `make
# cluster-vm-faults`).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

t0=$(date +%s)
bin=$("$root/scripts/apiserver/build.sh")
echo "cluster-vm: kube-apiserver and etcd in $bin ($(($(date +%s) - t0)) s)"
t1=$(date +%s)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs" ./cmd/kube-ipvs)
(cd "$root" && go test -c -o "$work/cluster.test" ./e2e/cluster)
echo "cluster-vm: agent and driver built ($(($(date +%s) - t1)) s)"

export KUBE_IPVS_CLUSTER_AGENT_BIN="$work/kube-ipvs"
cd "$root/e2e/cluster" # the test finds the repository at ../..
timeout -k 10 540 "$root/scripts/apiserver/run.sh" --agent-server https://10.0.2.100:6443 -- \
  "$work/cluster.test" -test.v -test.count=1 -test.timeout 510s -test.run "^${KUBE_IPVS_CLUSTER_TEST:-TestAgentAgainstAPIServer}\$"
echo "cluster-vm: PASS in $(($(date +%s) - t0)) s"
