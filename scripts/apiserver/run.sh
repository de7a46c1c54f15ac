#!/usr/bin/env bash
# run.sh: a real kube-apiserver (with etcd) on 127.0.0.1 for as long as a
# command runs, then stopped and wiped.
#
#   run.sh [--agent-server URL] [--timeout SECS] -- COMMAND [ARGS...]
#
# Authentication is a token file with two users: "admin" (system:masters) and
# the kube-ipvs ServiceAccount identity (system:serviceaccount:kube-system:kube-ipvs).
# Authorization is RBAC only, so the agent can do exactly what the ClusterRole
# in manifests/kube-ipvs.yaml grants once that is applied (nothing before).
# COMMAND runs with:
#   KUBE_IPVS_ADMIN_KUBECONFIG   admin, server https://127.0.0.1:PORT
#   KUBE_IPVS_AGENT_KUBECONFIG   the agent's identity, server --agent-server
#                                (default https://127.0.0.1:PORT), TLS unverified
#   KUBE_IPVS_AGENT_HOST_KUBECONFIG  the agent's identity, server https://127.0.0.1:PORT
#   KUBE_IPVS_PROXY_KUBECONFIG   kube-proxy's identity (user system:kube-proxy, which the
#                                API server's default RBAC binds to system:node-proxier,
#                                as on a kubeadm cluster), server --agent-server
#   KUBE_IPVS_APISERVER_PORT     the API server's port on 127.0.0.1
# and run.sh exits with COMMAND's status (125 if the API server never got ready).
# Binaries come from build.sh (built once, cached). Logs: $KUBE_IPVS_APISERVER_LOGS
# (a directory) keeps etcd.log and kube-apiserver.log after the run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "apiserver/run: error: $*" >&2; exit 125; }
log() { echo "apiserver/run: $*" >&2; }

agent_server=
ready_timeout=60
while [ $# -gt 0 ]; do
  case "$1" in
  --agent-server) agent_server=${2:?--agent-server needs URL}; shift 2 ;;
  --timeout) ready_timeout=${2:?--timeout needs SECS}; shift 2 ;;
  --) shift; break ;;
  *) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || die "no command"

bin=$("$here/build.sh")
[ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ] || die "build.sh gave no binaries"

dir=$(mktemp -d)
pids=()
stop() {
  local rc=$?
  # The API server first, while etcd still answers: stopped after etcd, its
  # graceful shutdown waits minutes on etcd connections. Each gets 10 s.
  local i p
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[i]}
    kill "$p" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null || :
    wait "$p" 2>/dev/null || :
  done
  if [ -n "${KUBE_IPVS_APISERVER_LOGS:-}" ]; then
    mkdir -p "$KUBE_IPVS_APISERVER_LOGS" && cp "$dir"/*.log "$KUBE_IPVS_APISERVER_LOGS"/ 2>/dev/null || :
  fi
  rm -rf "$dir"
  exit "$rc"
}
trap stop EXIT
trap 'exit 130' INT TERM

# A port nobody listens on now. Another process could take it before we bind;
# the daemons then fail to start and run.sh reports it (no silent retry).
used=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    grep -qx "$p" <<<"$used" || { used="$used"$'\n'"$p"; echo "$p"; return; }
  done
}
etcd_port=$(free_port)
peer_port=$(free_port)
port=$(free_port)

# Service-account keys: the API server refuses to start without them, although
# nothing here uses service-account tokens (the agent's identity is a static token).
openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
admin_token=$(openssl rand -hex 16)
agent_token=$(openssl rand -hex 16)
proxy_token=$(openssl rand -hex 16)
cat >"$dir/tokens.csv" <<TOKENS
$admin_token,admin,admin,"system:masters"
$agent_token,system:serviceaccount:kube-system:kube-ipvs,kube-ipvs,"system:serviceaccounts,system:serviceaccounts:kube-system"
$proxy_token,system:kube-proxy,kube-proxy
TOKENS

start=$(date +%s.%N)
"$bin/etcd" --name default --data-dir "$dir/etcd" --unsafe-no-fsync --log-level warn \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "default=http://127.0.0.1:$peer_port" --listen-metrics-urls "" \
  >"$dir/etcd.log" 2>&1 &
pids+=($!)
# --endpoint-reconciler-type=none: with a loopback advertise address the
# default reconciler makes the API server exit at once.
"$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
  --cert-dir "$dir/certs" --token-auth-file "$dir/tokens.csv" --authorization-mode RBAC \
  --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$dir/sa.pub" --service-account-signing-key-file "$dir/sa.key" \
  >"$dir/kube-apiserver.log" 2>&1 &
pids+=($!)

deadline=$(($(date +%s) + ready_timeout))
until [ "$(curl -sk --max-time 2 -H "Authorization: Bearer $admin_token" "https://127.0.0.1:$port/readyz" 2>/dev/null)" = ok ]; do
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { tail -n 20 "$dir"/*.log >&2; die "etcd or kube-apiserver exited before ready"; }
  done
  [ "$(date +%s)" -lt "$deadline" ] || { tail -n 20 "$dir"/*.log >&2; die "not ready within ${ready_timeout}s"; }
  sleep 0.2
done
ready_s=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
log "$("$bin/kube-apiserver" --version) ready on 127.0.0.1:$port in ${ready_s} s (etcd + kube-apiserver start to /readyz ok)"

kubeconfig() { # FILE SERVER USER TOKEN
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$2", insecure-skip-tls-verify: true}
users:
- name: $3
  user: {token: "$4"}
contexts:
- name: local
  context: {cluster: local, user: $3}
current-context: local
KC
}
kubeconfig "$dir/admin.kubeconfig" "https://127.0.0.1:$port" admin "$admin_token"
kubeconfig "$dir/agent.kubeconfig" "${agent_server:-https://127.0.0.1:$port}" kube-ipvs "$agent_token"
kubeconfig "$dir/agent-host.kubeconfig" "https://127.0.0.1:$port" kube-ipvs "$agent_token"
kubeconfig "$dir/proxy.kubeconfig" "${agent_server:-https://127.0.0.1:$port}" kube-proxy "$proxy_token"

export KUBE_IPVS_ADMIN_KUBECONFIG="$dir/admin.kubeconfig"
export KUBE_IPVS_AGENT_KUBECONFIG="$dir/agent.kubeconfig"
export KUBE_IPVS_AGENT_HOST_KUBECONFIG="$dir/agent-host.kubeconfig"
export KUBE_IPVS_PROXY_KUBECONFIG="$dir/proxy.kubeconfig"
export KUBE_IPVS_APISERVER_PORT="$port"
rc=0
"$@" || rc=$?
exit "$rc"
