#!/usr/bin/env bash
# apicost.sh (`make apicost`): what one node's watch path costs the API
# server and the node, over each transport the agent can talk: HTTP/1.1 or
# HTTP/2, gzip or identity. Not part of `make test`: it measures, and its
# CPU numbers depend on the machine.
#
# A real kube-apiserver (scripts/apiserver/run.sh) is filled with N Services
# x 10 endpoints and a number of Nodes; then, per N, each transport runs the
# agent's watch path (e2e/apicost: source.NewClient, source.Kubernetes into
# an objects.Store) in its own process, through a byte- and connection-
# counting TCP proxy on loopback, APICOST_RUNS times with the order rotated.
# Measured: connections and bytes each way until the store synced (the
# first list) and per EndpointSlice and Service change once the store saw
# it; the client's CPU for the first list (getrusage); the API server's CPU
# for it (/proc/PID/stat, its idle rate taken out). Prints a Markdown table
# of medians (also in $APICOST_OUT/table.md, the raw runs in results.jsonl).
#
# Settings (environment):
#   APICOST_N        N list, ascending, comma-separated (default 1000,5000)
#   APICOST_RUNS     runs of each transport per N (default 3)
#   APICOST_NODES    Nodes in the cluster, which the agent lists too (default 100)
#   APICOST_CHANGES  EndpointSlice changes and Service changes per run (default 100)
#   APICOST_OUT      output directory (default bin/apicost)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${APICOST_OUT:-$root/bin/apicost}
mkdir -p "$out"
(cd "$root" && go build -trimpath -o "$root/bin/apicost" ./e2e/apicost)

export APICOST_BIN=$root/bin/apicost APICOST_OUT_DIR=$out
"$root/scripts/apiserver/run.sh" --timeout 120 -- bash -c '
  set -euo pipefail
  pid=$(pgrep -f "kube-apiserver .*--secure-port $KUBE_IPVS_APISERVER_PORT( |\$)")
  [ "$(wc -w <<<"$pid")" = 1 ] || { echo "apicost: no single kube-apiserver on port $KUBE_IPVS_APISERVER_PORT: $pid" >&2; exit 1; }
  echo "apicost: $(nproc) CPUs, load $(cut -d" " -f1-3 /proc/loadavg), kube-apiserver pid $pid" >&2
  "$APICOST_BIN" run --kubeconfig "$KUBE_IPVS_ADMIN_KUBECONFIG" --apiserver-pid "$pid" \
    --ns "${APICOST_N:-1000,5000}" --runs "${APICOST_RUNS:-3}" --nodes "${APICOST_NODES:-100}" \
    --changes "${APICOST_CHANGES:-100}" --out "$APICOST_OUT_DIR"
'
