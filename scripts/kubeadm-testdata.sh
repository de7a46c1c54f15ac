#!/usr/bin/env bash
# kubeadm-testdata.sh: regenerate the files kubeadm itself writes for
# kube-proxy, which the tests read (internal/config/testdata/README.md):
# kubeadm (the release matching client-go in go.mod, built once by
# scripts/apiserver/build.sh kubeadm) prints the kube-proxy ConfigMap and
# DaemonSet of `kubeadm init` with --dry-run; nothing here is written by hand.
# Not part of `make test`: run it when the Kubernetes release moves, and
# commit what changed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$root/internal/config/testdata"
bin=$("$root/scripts/apiserver/build.sh" kubeadm)
version=$("$bin/kubeadm" version -o short)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KUBEADM_INIT_DRYRUN_DIR="$work/dry"
mkdir -p "$KUBEADM_INIT_DRYRUN_DIR" "$work/patches"

# cluster FILE [KUBEPROXYCONFIGURATION-FIELDS]: a kubeadm configuration as a
# user writes it: the control plane's address, the pod CIDR (and a neutral
# image repository: the tests read no image name), and a
# KubeProxyConfiguration document with mode ipvs and the given fields.
cluster() {
  cat >"$1" <<CFG
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
patches:
  directory: $work/patches
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $version
controlPlaneEndpoint: 192.0.2.10:6443
imageRepository: images.example
certificatesDir: $work/pki
networking:
  podSubnet: 10.244.0.0/16
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
${2:-}
CFG
}

# dryrun CONFIG: the objects `kubeadm init phase addon kube-proxy --dry-run`
# would create, as one YAML stream.
dryrun() {
  "$bin/kubeadm" init phase addon kube-proxy --config "$1" --dry-run 2>/dev/null |
    awk '/^\[dryrun\] Attached object:/ { if (n++) print "---"; on = 1; next }
         /^\[/ { on = 0; next }
         on && NF { print }'
}

# pick KIND: one document of that kind from a YAML stream on stdin.
pick() { awk -v kind="kind: $1" 'BEGIN { RS = "---\n" } index("\n" $0, "\n" kind "\n") { printf "%s", $0 }'; }

# config.conf of a ConfigMap on stdin.
configconf() { sed -n '/^  config.conf: |-$/,/^  [a-z]/p' | sed -e '1d' -e '/^  [a-z]/d' -e 's/^    //'; }

cluster "$work/plain.yaml"
"$bin/kubeadm" init phase certs ca --config "$work/plain.yaml" >/dev/null 2>&1
"$bin/kubeadm" init phase kubeconfig admin --config "$work/plain.yaml" --kubeconfig-dir "$KUBEADM_INIT_DRYRUN_DIR" >/dev/null 2>&1

plain=$(dryrun "$work/plain.yaml")
{ printf '%s\n' "$plain" | pick ConfigMap; echo "---"; printf '%s\n' "$plain" | pick DaemonSet; } >"$out/kubeadm-$version-kube-proxy.yaml"
printf '%s\n' "$plain" | pick ConfigMap | configconf >"$out/kubeadm-$version-ipvs.conf"

# The same, with the IPVS settings a user tunes.
cluster "$work/tuned.yaml" 'clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
nodePortAddresses: [primary]
iptables:
  masqueradeAll: true
ipvs:
  scheduler: lc
  strictARP: true
  syncPeriod: 1m
  minSyncPeriod: 2s
  tcpTimeout: 600s
  tcpFinTimeout: 30s
  udpTimeout: 60s
  excludeCIDRs: [192.0.2.0/24]'
dryrun "$work/tuned.yaml" | pick ConfigMap | configconf >"$out/kubeadm-$version-ipvs-tuned.conf"

# kube-proxy's DaemonSet with docs/migration.md's patch, as kubeadm applies
# it at every upgrade when given --patches.
cp "$root/manifests/migration/kubeproxydaemonset+strategic.yaml" "$work/patches/"
dryrun "$work/plain.yaml" | pick DaemonSet >"$out/kubeadm-$version-kube-proxy-patched.yaml"
echo "kubeadm-testdata: wrote kubeadm-$version-{kube-proxy.yaml,kube-proxy-patched.yaml,ipvs.conf,ipvs-tuned.conf} in internal/config/testdata"
