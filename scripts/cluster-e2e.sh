#!/usr/bin/env bash
# cluster-e2e.sh (`make cluster-e2e`): a cluster of four nodes inside the one
# IPVS VM, against a real kube-apiserver + etcd on this machine's loopback.
#
# Each node is a network namespace with its own proxy, its pods are
# namespaces behind it, an "outside" namespace is the client and the load
# balancer (see e2e/multinode/doc.go). The driver (e2e/multinode, a Go test
# built static) runs in the VM as root, talks to the API server as admin
# through the forwarded port and plays the controllers; the agents run under
# the RBAC of manifests/kube-ipvs.yaml, kube-proxy as system:kube-proxy.
# Phases, on one boot: migration from kube-proxy v1.37 --proxy-mode=ipvs node
# by node (kubeadm's KubeProxyConfiguration), traffic policies across nodes,
# a rolling upgrade of the agent, one node back to kube-proxy; a report at
# the end. Node 4 runs the agent from the image's root file system
# (bin/kube-ipvs-image.oci.tar: `make image` first; the Makefile does).
#
# Needs: kube-apiserver, etcd and kube-proxy from scripts/apiserver/build.sh
# (built once, cached), the VM from scripts/vm (cached).
# CLUSTER_E2E_RUN=REGEXP runs a subset of the phases (go test -run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
log() { echo "cluster-e2e: $*" >&2; }

image=${KUBE_IPVS_IMAGE:-$root/bin/kube-ipvs-image.oci.tar}
[ -f "$image" ] || { log "no $image: run 'make image' first"; exit 1; }

bin=$("$root/scripts/apiserver/build.sh")
log "kube-apiserver, etcd and kube-proxy in $bin ($(($(date +%s) - t0)) s)"

t1=$(date +%s)
version=$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo dev)
(
  cd "$root"
  export CGO_ENABLED=0
  go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$work/kube-ipvs" ./cmd/kube-ipvs
  # The rolling upgrade's "new binary": the same source under another version.
  go build -trimpath -ldflags "-s -w -X main.version=$version-next" -o "$work/kube-ipvs-next" ./cmd/kube-ipvs
  go build -trimpath -ldflags '-s -w' -o "$work/echo-server" ./e2e/tools/echo
  go test -c -trimpath -ldflags '-s -w' -o "$work/multinode.test" ./e2e/multinode
)
log "agent, echo and driver built ($(($(date +%s) - t1)) s)"

# The image as a runtime would run it: its root file system (busybox tar in
# the guest reads plain GNU tar), ENTRYPOINT + CMD and environment.
"$root/scripts/image.sh" unpack "$work/bundle" >&2
tar --format=gnu -C "$work/bundle/rootfs" -cf "$work/image.tar" .
jq -r '.process.args[]' "$work/bundle/config.json" >"$work/image-args"
jq -r '.process.env[]' "$work/bundle/config.json" >"$work/image-env"
rm -rf "$work/bundle"
log "image unpacked: $(du -h "$work/image.tar" | cut -f1) root file system, entrypoint $(tr '\n' ' ' <"$work/image-args")"

# kubeadm's KubeProxyConfiguration, with one change: the nodes are network
# namespaces, and nf_conntrack_max (which kube-proxy sets from maxPerCore
# and fails without) is writable only from the VM's initial namespace, which
# a real node's kube-proxy has. maxPerCore 0 leaves it as it is.
config=$root/internal/config/testdata/kubeadm-v1.37.2-ipvs.conf
grep -q '^  maxPerCore: null$' "$config" || { log "$config: no 'maxPerCore: null' to change"; exit 1; }
sed 's/^  maxPerCore: null$/  maxPerCore: 0/' "$config" >"$work/kube-proxy.conf"

# Runs inside run.sh (the API server's environment): the guest's kubeconfigs
# name the forwarded address.
cat >"$work/in-apiserver.sh" <<'EOF'
set -euo pipefail
work=$1; shift
sed "s#https://127.0.0.1:[0-9]*#https://10.0.2.100:6443#" "$KUBE_IPVS_ADMIN_KUBECONFIG" >"$work/admin.kubeconfig"
exec "$@" --fwd "6443:$KUBE_IPVS_APISERVER_PORT" \
  --add "$work/admin.kubeconfig:/etc/cluster-e2e/admin.kubeconfig" \
  --add "$KUBE_IPVS_AGENT_KUBECONFIG:/etc/kube-ipvs/agent.kubeconfig" \
  --add "$KUBE_IPVS_PROXY_KUBECONFIG:/var/lib/kube-proxy/kubeconfig.conf" \
  -- /usr/local/bin/multinode.test -test.v -test.count=1 -test.timeout 25m ${CLUSTER_E2E_RUN:+-test.run "$CLUSTER_E2E_RUN"}
EOF

args=(--timeout "${KUBE_IPVS_VM_TIMEOUT:-1800}" --mem 3072
  --add "$work/kube-ipvs:/usr/local/bin/kube-ipvs"
  --add "$work/kube-ipvs-next:/usr/local/bin/kube-ipvs-next"
  --add "$work/echo-server:/usr/local/bin/echo-server"
  --add "$work/multinode.test:/usr/local/bin/multinode.test"
  --add "$bin/kube-proxy:/usr/local/bin/kube-proxy"
  --add "$work/image.tar:/image.tar"
  --add "$work/image-args:/etc/cluster-e2e/image-args"
  --add "$work/image-env:/etc/cluster-e2e/image-env"
  --add "$root/manifests/kube-ipvs.yaml:/etc/cluster-e2e/kube-ipvs.yaml"
  --add "$work/kube-proxy.conf:/etc/kube-proxy/config.conf"
  --env KUBE_IPVS_REQUIRE_KERNEL=1)

log "starting the API server, then the VM (setup $(($(date +%s) - t0)) s)"
rc=0
timeout -k 10 "${KUBE_IPVS_VM_TIMEOUT:-1800}" "$root/scripts/apiserver/run.sh" --agent-server https://10.0.2.100:6443 -- \
  bash "$work/in-apiserver.sh" "$work" "$root/scripts/vm/run.sh" "${args[@]}" || rc=$?
log "exit $rc after $(($(date +%s) - t0)) s"
exit "$rc"
