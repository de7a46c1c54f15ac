#!/usr/bin/env bash
# bench.sh (`make bench`): kube-ipvs side by side with kube-proxy in its IPVS
# and nftables modes, on a real IPVS kernel against a real kube-apiserver.
# Not part of `make test`: it takes long and its numbers depend on the machine.
#
# Per variant and N (one fresh API server and one VM boot each): the host
# fills the API server with N Services × 10 endpoints (e2e/bench/cmd/bench-host),
# then in the VM each tool runs in turn on a cleaned kernel, BENCH_RUNS times
# with the order rotated (e2e/bench/cmd/bench-guest), and is measured: time
# to serve (every Service in the kernel, its ClusterIP bound, the sets and
# rules in place, and a sample answering through its ClusterIP from a pod),
# kubernetes.default against the informers' sync, idle CPU over two periods
# of whole reads, endpoint changes at a fixed rate (latency, CPU a minute,
# kube-proxy's own histograms), a burst of concurrent changes, and for
# kube-ipvs its kernel operations per change. The run's section (medians
# with spread, the goals as a table met or missed, a PNG plot) is appended
# to docs/benchmarks.md; the plot and the raw JSON go to docs/benchmarks/.
#
# Settings (environment):
#   BENCH_N               N list, comma-separated (default 1000,5000,10000)
#   BENCH_CHANGES         single changes per tool (default 100), or per N: 1000:100,5000:30
#   BENCH_VARIANTS        where the endpoints are, comma-separated (default none,tenth,all):
#                         none names no node, all names the VM's node, tenth one in ten
#   BENCH_RUNS            runs of every tool per boot, the order rotated (default 3)
#   BENCH_SAMPLE          Services asked through their ClusterIP from a pod (default 100)
#   BENCH_SPACING         the changes' fixed rate: one every BENCH_SPACING (default 2s)
#   BENCH_BURST           changes in the concurrent burst (default 1000)
#   BENCH_IDLE            idle window at least (default 60s); it is two periods of the
#                         tool's whole reads of the kernel (and 10 s) when that is longer
#   BENCH_IDLE_MAX        the idle window's bound (default 45m); a shorter window is flagged
#   BENCH_CHANGE_TIMEOUT  a change not seen by then is counted as never seen (default 60s)
#   BENCH_CHANGE_BUDGET   stop a tool's change series after this long (default 0: never);
#                         the table says how many changes each tool got through
#   BENCH_SETTLE_LIMIT    after serving, wait at most this long for the tool to
#                         go quiet before the idle window (default 5m)
#   BENCH_COLD_TIMEOUT    a tool not serving by then is recorded as not serving (default 15m)
#   BENCH_VM_TIMEOUT      one boot's bound, every run of every tool (default 12h)
#   BENCH_VM_MEM          the guest's RAM in MB (default 2048; 50k Services want 4096)
#   BENCH_ROLL            sizes of the Services rolled, comma-separated (default 1000,10000; "" for
#                         none): the IPVS tools' last step, one Service of each size in turn,
#                         created, every pod replaced 10 at a time at 100 a second
#                         (slices of 100), the kernel's lag and the CPU per endpoint change
#                         measured, then deleted
#   BENCH_ROLL_FOR        how long each rolling update goes on (default 60s)
#   BENCH_ROLL_REST       after each read of the rolled Service, the guest waits this many
#                         times the read's own time before the next (default 0: back to back)
#   BENCH_TOOLS           default kube-proxy-ipvs,kube-proxy-nftables,kube-ipvs
#   BENCH_KUBE_IPVS_REF   build kube-ipvs from this commit instead of the work tree, the
#                         harness staying the work tree's: a before/after pair of runs
#                         measures a change with one harness (e.g. BENCH_TOOLS=kube-ipvs)
#   BENCH_DOC             the doc to append to (default docs/benchmarks.md)
#   BENCH_EXTRA_FLAGS     appended to every tool's command line, to look into one
#                         (e.g. BENCH_TOOLS=kube-proxy-ipvs BENCH_EXTRA_FLAGS=--v=4); not for the doc
#                         (kube-ipvs: --cpu-profile /tmp/cpu.pprof or --heap-profile
#                         /tmp/heap.pprof; the profile lands in bin/bench-N-cpu.pprof)
#   BENCH_GODEBUG         the tools' GODEBUG, to look into one (gctrace=1 logs each collection's heap)
#   BENCH_LOG_LINES       how many of each tool's last log lines the results keep (default 15)
# A quick run (about half an hour): BENCH_N=200 BENCH_VARIANTS=tenth BENCH_RUNS=1
#   BENCH_CHANGES=20 BENCH_BURST=100 BENCH_SETTLE_LIMIT=60s BENCH_COLD_TIMEOUT=5m make bench
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ns=${BENCH_N:-1000,5000,10000}
changes=${BENCH_CHANGES:-100}
spacing=${BENCH_SPACING:-2s}
burst=${BENCH_BURST:-1000}
idle=${BENCH_IDLE:-60s}
change_timeout=${BENCH_CHANGE_TIMEOUT:-60s}
change_budget=${BENCH_CHANGE_BUDGET:-0s}
settle_limit=${BENCH_SETTLE_LIMIT:-5m}
tools=${BENCH_TOOLS:-kube-proxy-ipvs,kube-proxy-nftables,kube-ipvs}
variants=${BENCH_VARIANTS:-none,tenth,all}
runs=${BENCH_RUNS:-3}
sample=${BENCH_SAMPLE:-100}
roll=${BENCH_ROLL-1000,10000}
roll_for=${BENCH_ROLL_FOR:-60s}
roll_rest=${BENCH_ROLL_REST:-0}
idle_max=${BENCH_IDLE_MAX:-45m}
cold_timeout=${BENCH_COLD_TIMEOUT:-15m}
doc=${BENCH_DOC:-$root/docs/benchmarks.md}
log() { echo "bench: $*" >&2; }

# local_every VARIANT: one endpoint in how many names the VM's node.
local_every() {
  case "$1" in
  none) echo 0 ;;
  all) echo 1 ;;
  tenth) echo 10 ;;
  *) log "BENCH_VARIANTS: unknown variant $1 (none, tenth, all)"; exit 2 ;;
  esac
}

# changes_for N: BENCH_CHANGES is one count, or N:count pairs (100 if N is not listed).
changes_for() {
  case "$changes" in
  *:*)
    local pair
    for pair in ${changes//,/ }; do
      [ "${pair%%:*}" = "$1" ] && { echo "${pair#*:}"; return; }
    done
    echo 100 ;;
  *) echo "$changes" ;;
  esac
}

# take_profiles LOG N: the Go profiles a tool wrote in the VM (BENCH_EXTRA_FLAGS
# such as kube-ipvs' hidden --cpu-profile /tmp/NAME.pprof), from the console
# into bin/bench-N-NAME.pprof.
take_profiles() {
  local name
  mkdir -p "$root/bin"
  for name in $(sed -n 's/^bench-profile-begin \(.*\)$/\1/p' "$1"); do
    sed -n "/^bench-profile-begin $name\$/,/^bench-profile-end $name\$/p" "$1" | sed '1d;$d' | base64 -d >"$root/bin/bench-$2-$name"
    log "profile $name in bin/bench-$2-$name"
  done
}

[ "$(id -u)" = 0 ] || { log "must run as root (the VM scripts install packages)"; exit 2; }
t0=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# kube-apiserver, etcd and kube-proxy at the client-go release (cached after the first build).
bin=$("$root/scripts/apiserver/build.sh")
# kube-proxy's nftables mode runs the nft tool: the VM gets the host's, with its libraries.
mapfile -t adds < <("$root/scripts/vm/nft-adds.sh")

mkdir -p "$work/bin"
cp "$bin/kube-proxy" "$work/bin/kube-proxy"
src=$root
version=$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo dev)
if [ -n "${BENCH_KUBE_IPVS_REF:-}" ]; then
  src=$work/src
  mkdir -p "$src"
  git -C "$root" archive "$BENCH_KUBE_IPVS_REF" | tar -x -C "$src"
  version=$(git -C "$root" describe --tags --always "$BENCH_KUBE_IPVS_REF")
  log "kube-ipvs from $BENCH_KUBE_IPVS_REF ($version)"
fi
(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$work/bin/kube-ipvs" ./cmd/kube-ipvs)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/bin/echo" ./e2e/tools/echo)
(cd "$root/e2e/bench" && CGO_ENABLED=0 go build -trimpath -o "$work/bin/bench-guest" ./cmd/bench-guest &&
  go build -o "$work/bench-host" ./cmd/bench-host && go build -o "$work/bench-report" ./cmd/bench-report)
log "tools and drivers ready ($(($(date +%s) - t0)) s)"

stamp=$(date -u +%Y%m%dT%H%MZ)
outdir=$(dirname "$doc")/benchmarks
mkdir -p "$outdir"
results=()
IFS=, read -r -a nlist <<<"$ns"
IFS=, read -r -a vlist <<<"$variants"
for variant in "${vlist[@]}"; do
  every=$(local_every "$variant")
  for n in "${nlist[@]}"; do
    out="$outdir/$stamp-n$n-$variant.json"
    log "N=$n, endpoints $variant: API server, fill, VM with ${tools//,/, } x $runs ($(date -u +%H:%M:%S) UTC)"
    tn=$(date +%s)
    if "$root/scripts/apiserver/run.sh" --timeout 120 -- "$work/bench-host" --root "$root" --bin "$work/bin" \
      --n "$n" --local-every "$every" --runs "$runs" --sample "$sample" --idle-max "$idle_max" --cold-timeout "$cold_timeout" --vm-timeout "${BENCH_VM_TIMEOUT:-12h}" --mem "${BENCH_VM_MEM:-2048}" \
      --changes "$(changes_for "$n")" --spacing "$spacing" --burst "$burst" --idle "$idle" \
      --change-timeout "$change_timeout" --change-budget "$change_budget" --roll "$roll" --roll-for "$roll_for" --roll-rest "$roll_rest" --settle-limit "$settle_limit" --tools "$tools" --out "$out" "${adds[@]}" \
      --version-kube-ipvs "$version" --version-kube-proxy "$("$bin/kube-proxy" --version | awk '{print $2}')" \
      --version-apiserver "$("$bin/kube-apiserver" --version | awk '{print $2}')" \
      --version-nft "$(nft --version | awk '{print $2}')" | tee "$work/console-$n-$variant.log"; then
      :
    else
      log "N=$n, $variant: bench-host failed (status $?)"
    fi
    take_profiles "$work/console-$n-$variant.log" "$n-$variant"
    [ -f "$out" ] && results+=("$out")
    log "N=$n, $variant: $(($(date +%s) - tn)) s"
  done
done
[ ${#results[@]} -gt 0 ] || { log "no results"; exit 1; }

wall=$(($(date +%s) - t0))
if [ ! -f "$doc" ]; then
  cat >"$doc" <<'HEAD'
# Benchmarks: kube-ipvs beside kube-proxy (IPVS and nftables modes)

Written by `make bench` (scripts/bench.sh; the drivers are in e2e/bench). Each run
appends a section. Every number comes from a VM with a software-emulated CPU (TCG) on a
machine shared with other work: absolute values are slow and noisy (a run records the
load average at its start), and only numbers from the same run (same N, same boot, tools
one after the other on a cleaned kernel) may be compared with each other.

What is measured, per tool, N and variant (N Services × 10 endpoints, written by the host
before the VM boots; each tool at its defaults, told only the kubeconfig and the node name;
the VM's kernel has IPv6, so kube-proxy runs its IPv6 proxier beside the IPv4 one, as on a
real node). A section without a "time to serve" row took the full IPVS table as its cold
start, with one run per tool, a 60 s idle window and changes paced by when each was seen.

- **variants**: the endpoints name no node; one in ten names the VM's node; all do (a
  one-node cluster). An endpoint on the node costs kube-ipvs a hairpin member
  (KUBE-IPVS-LOOP-BACK) and kube-proxy's IPVS mode one in KUBE-LOOP-BACK.
- **runs**: every tool runs three times per boot (BENCH_RUNS), the order rotated by one
  each run, so each is measured once first, once in the middle and once last. Cells are
  the median, with the spread (lowest–highest) when the runs differ.
- **time to serve**: process start until every Service serves, with the CPU used by then:
  the kernel table whole (IPVS: every Service's 10 endpoints at a weight above 0 in
  `/proc/net/ip_vs`; nftables mode: every ClusterIP in the `service-ips` map and every
  Service's numgen map holding its 10 endpoints), every ClusterIP bound on `kube-ipvs0`
  (the IPVS tools), the sets and nat rules in place (kube-ipvs: KUBE-IPVS-CLUSTER-IP,
  -FRONTENDS, -VIPS, -LOOP-BACK for the node's endpoints, and its jumps from PREROUTING,
  OUTPUT and POSTROUTING; kube-proxy's IPVS mode: KUBE-CLUSTER-IP, KUBE-LOOP-BACK, its
  jumps to KUBE-SERVICES and KUBE-POSTROUTING), and a sample of 100 Services spread over
  N (BENCH_SAMPLE) answering through ClusterIP:80 from a pod (a network namespace with a
  veth into the guest). The endpoints really answer: three echo servers (e2e/tools/echo),
  each in a namespace holding a whole block of endpoint addresses as local, stand behind
  every Service. The parts are read in turn, each until it is whole; the sets, rules and
  sample once the table is. Each part's own time is in the table too.
- **kubernetes.default**: from process start until a pod completes a TLS handshake with
  the API server through 10.96.0.1:443 (the host gives default/kubernetes an endpoint, the
  API server as the guest reaches it; the guest masquerades pod traffic leaving the node,
  as a CNI does), reported after the informers' sync: the moment the tool's log says so
  (kube-ipvs: "source synced" for its four sources; kube-proxy: client-go's "Caches are
  synced" for service config and endpoint slice config), polled every 100 ms.
- **start work done**: after serving, the time and CPU until the tool has gone quiet (under
  10% of a CPU over 5 s), or "never quiet" within the settle limit.
- **idle CPU**: CPU a minute over a window of at least two periods of the tool's whole
  reads of the kernel (30 s, the sync periods' default; for kube-ipvs the longer wait its
  rescan announces in its log when reads are slow), at least BENCH_IDLE, at most
  BENCH_IDLE_MAX (a shorter window is flagged and its goal not judged). kube-proxy's
  nftables mode rewrites what someone else changed in its hourly full sync, which no
  window here holds.
- **changes**: the host replaces one endpoint of one Service (an EndpointSlice update,
  stamped with `endpoints.kubernetes.io/last-change-trigger-time` as the EndpointSlice
  controller does) every 2 s, whether or not the ones before have been seen; latency is
  from the guest's request to the kernel showing the new endpoint taking traffic and the
  old one not (IPVS: the virtual server's destinations over netlink; nftables mode: the
  Service's chain and its numgen map over netlink). A change not seen within the timeout
  counts at the timeout, a lower bound, in the p99. **CPU a minute** is the CPU over
  exactly the changes' period (k changes: k × 2 s): what that rate costs, however few
  changes a saturated tool got through. kube-proxy's own view of the same series is its
  /metrics (port 10249): `kubeproxy_sync_proxy_rules_duration_seconds` and
  `kubeproxy_network_programming_duration_seconds`, the series' delta, read as the
  bucket holding the p99 (network programming is timed from the trigger time on the
  host's clock to the sync's end on the guest's).
- **burst**: that many changes (distinct Services) written concurrently by the host;
  time from the request to the kernel showing all of them.
- **rolling update** (the IPVS tools' last step; BENCH_ROLL): a Service of each size, in
  slices of 100 with one pod in ten on the node, is created and, once every endpoint is
  live in the kernel, rolled for BENCH_ROLL_FOR: every 100 ms the host replaces the 10
  pods that turned terminating the step before by 10 new ready ones and turns the next
  10 terminating (30 endpoint changes, the touched slices written at once). A step's lag
  is from the guest's request until the Service's destinations show all of it (new pods
  above weight 0, terminating and removed ones at 0 or gone); CPU per endpoint change
  is over exactly the steps' period. The guest reads the Service's destinations over
  netlink back to back while a step is unseen, or with BENCH_ROLL_REST=f waits f times
  each read's own time before the next: a read of 10,000 destinations holds the IPVS
  lock for every datagram it fills and a CPU throughout, which the tool then lacks. A
  step is timed at the end of the read that saw it. The Service is deleted after.
- **kernel operations per change** (kube-ipvs only): the change series' delta of
  `kube_ipvs_operations_total`, divided by the changes.
- **goals**: a table per variant, judged on its largest N's medians: goal, measure,
  threshold, what was measured, met or missed. A value missing, never reached or measured
  over too short a window misses its goal. kube-proxy's side of a latency goal is the
  lower bound of the bucket holding its own network programming p99, so neither the
  harness's timeout nor a bucket's width can meet a goal. A kube-proxy mode not serving
  within the cold-start bound (BENCH_COLD_TIMEOUT) counts as the bound and its CPU by
  then, lower bounds marked "≥"; kube-ipvs not serving misses.

HEAD
fi
{
  echo
  "$work/bench-report" --png "$outdir/$stamp.png" --png-ref "benchmarks/$stamp.png" --wall "${wall}s" "${results[@]}"
} >>"$doc"
log "appended to $doc; plot $outdir/$stamp.png; raw ${results[*]}; ${wall} s in all"
