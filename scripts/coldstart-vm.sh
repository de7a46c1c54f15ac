#!/usr/bin/env bash
# coldstart-vm.sh: measure the cold path on a real IPVS kernel, in a
# throwaway VM (scripts/vm/run.sh), without an API server, so that only the
# agent's own start is timed:
# for each N, manifests of N ClusterIP Services × 10 endpoints, the kernel
# cleaned, then `kube-ipvs agent --manifests DIR --once` timed (wall, user
# and system CPU, peak RSS, operations, and the sync alone, without reading
# the files). Not part of `make test`.
#
#   scripts/coldstart-vm.sh [N ...]        (default: 1000 5000)
#
# Settings (environment): COLDSTART_PROFILE=1 writes a Go CPU profile and a
# heap profile (taken as the run ends) per start to bin/coldstart-cpu-N.pprof and
# bin/coldstart-heap-N.pprof, N preceded by the family set when
# COLDSTART_FAMILIES is not ipv4 alone (dual-N) and then by the binding
# when COLDSTART_BINDINGS lists several (address-dual-N) (read with `go tool pprof -top bin/kube-ipvs.coldstart
# bin/coldstart-cpu-N.pprof`; -sample_index=alloc_space for what the run allocated); COLDSTART_VIPS=1 also times binding N addresses on
# a dummy link against N local routes (the two ways to make VIPs local),
# a thousand at a time, with iproute2's `ip -batch`; COLDSTART_RESYNC=SECS then
# runs the agent again on the table it left for SECS seconds (its first sync
# and the periodic resyncs read the whole kernel) and prints each full sync's
# time and the CPU used, with profiles bin/coldstart-{cpu,heap}-resync-N.pprof;
# COLDSTART_SCAN=1 then times the rescan's read of that table and its parts
# (BenchmarkScanKernel, internal/dataplane/linux), with a CPU profile of the
# whole read in bin/coldstart-cpu-scan-N.pprof (read it with bin/linux.test.coldstart);
# COLDSTART_SCAN_REFS="REV..." also times the whole read as each git revision
# makes it (the benchmark is copied into its tree), turn about with this tree's,
# on the same boot and table. COLDSTART_BINDINGS="address local-route" starts
# the agent once per --vip-binding for each N (default: address alone), each
# from a clean kernel, on the same boot. COLDSTART_FAMILIES="ipv4 dual"
# does the same per family set (default: ipv4 alone, the lines as they
# always were): ipv4 is the manifests above; dual makes every Service
# RequireDualStack, ipFamilies [IPv4, IPv6], with an IPv6 ClusterIP
# (fd00:10:96::/112) beside its IPv4 one and a second EndpointSlice,
# addressType IPv6, of ten endpoints on the same node, so twice the virtual
# servers, real servers and VIPs (no flag differs: the agent serves both
# families by default and validates ClusterIPs against no service CIDR).
# The two settings combine as a cross product: for each N, each family
# set, each binding, in that order, each start from a clean kernel after
# the settle below. With other family sets than ipv4 alone every line
# names its set (families=ipv4 or families=dual, after n=), and once an
# N has both, a line per binding gives dual ÷ ipv4 of the start's wall
# time, of the sync alone and of user + system CPU, and of the operations
# (about 2.00: dual is twice the work):
#   coldstart: ratio n=N binding=B dual/ipv4 wall=W sync=S cpu=C ops=O
# A start whose table is not what its manifests ask for (virtual servers,
# real servers, VIPs as addresses or routes, e.g. a family not programmed)
# gets a "short:" line after its own and no ratio. COLDSTART_SETTLE (seconds, default
# 240) is the wait before every start but the boot's first, after the
# kernel was cleaned:
# IPVS walks its list of real servers deleted in the last two to four
# minutes on every real server added, so a start right after another's
# table was deleted is slower by the square of the tables (10k: 164 s
# instead of 14–18 s). KUBE_IPVS_VM_MEM sizes the guest (MB, default 2048:
# 50,000 Services want more).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ns=("$@")
[ ${#ns[@]} -gt 0 ] || ns=(1000 5000)
families=${COLDSTART_FAMILIES:-ipv4}
for f in $families; do
  case $f in
  ipv4 | dual) ;;
  *) echo "coldstart-vm: COLDSTART_FAMILIES: want ipv4 and/or dual, got $f" >&2; exit 2 ;;
  esac
done
mkdir -p "$root/bin"

(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs" ./cmd/kube-ipvs)
cp "$work/kube-ipvs" "$root/bin/kube-ipvs.coldstart"
# The start is timed by rusage (e2e/tools/rusage), not busybox's time -v:
# that prints the peak resident size four times too large.
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/rusage" ./e2e/tools/rusage)
adds=(--add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" --add "$work/rusage:/usr/local/bin/rusage" --add "$work/guest.sh:/guest.sh")
if [ "${COLDSTART_SCAN:-0}" = 1 ]; then
  (cd "$root" && CGO_ENABLED=0 go test -trimpath -c -o "$work/linux.test" ./internal/dataplane/linux)
  cp "$work/linux.test" "$root/bin/linux.test.coldstart"
  adds+=(--add "$work/linux.test:/usr/local/bin/linux.test")
  for rev in ${COLDSTART_SCAN_REFS:-}; do
    mkdir "$work/src-$rev"
    git -C "$root" archive "$rev" | tar -x -C "$work/src-$rev"
    cp "$root/internal/dataplane/linux/scan_bench_test.go" "$work/src-$rev/internal/dataplane/linux/"
    (cd "$work/src-$rev" && CGO_ENABLED=0 go test -trimpath -c -o "$work/linux.test-$rev" ./internal/dataplane/linux)
    adds+=(--add "$work/linux.test-$rev:/usr/local/bin/linux.test-$rev")
  done
fi

cat >"$work/guest.sh" <<'GUEST'
set -u
NODE=node-a
M=/tmp/manifests
# seconds turns a Go duration as the JSON log writes it ("1.5s", "845ms",
# "1m2.5s") into seconds.
seconds() {
  awk -v d="$1" 'BEGIN {
    s = 0
    while (match(d, /^[0-9.]+(h|ms|µs|us|ns|m|s)/)) {
      tok = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
      u = tok; sub(/^[0-9.]+/, "", u)
      f = u == "h" ? 3600 : u == "m" ? 60 : u == "s" ? 1 : u == "ms" ? 1e-3 : u == "ns" ? 1e-9 : 1e-6
      s += (tok + 0) * f
    }
    printf "%.6f", s
  }'
}

# manifests N FAMILIES: N Services, a thousand to a file (a manifest file
# may hold 8 MiB). ipv4: each ClusterIP 10.96.A.B:80 with ten ready
# endpoints 10.(128+j).A.B:8080 in one IPv4 EndpointSlice. dual: the same,
# and each Service RequireDualStack with a second ClusterIP
# fd00:10:96::X (X = index + 1 in hex: fd00:10:96::/112 up to 65,535
# Services, a further group beyond) and a second EndpointSlice, IPv6, of
# ten ready endpoints fd00:10:(128+j)::X, on the same node: twice the
# virtual servers, real servers and VIPs. The Node gets an IPv6
# InternalIP too, as a dual-stack node has.
manifests() {
  rm -rf $M; mkdir -p $M
  {
    printf 'apiVersion: v1\nkind: Node\nmetadata: {name: %s}\nstatus:\n  addresses:\n    - {type: InternalIP, address: 192.168.122.10}\n' $NODE
    [ "$2" = dual ] && printf '    - {type: InternalIP, address: "fd00:192:168:122::10"}\n'
  } >$M/node.yaml
  awk -v n="$1" -v fams="$2" -v node=$NODE -v dir=$M 'BEGIN {
    for (i = 0; i < n; i++) {
      if (i % 1000 == 0) { if (f != "") close(f); f = dir "/services-" int(i / 1000) ".yaml" }
      a = int(i / 250); b = i % 250 + 1
      x = i + 1; x = int(x / 65536) ? sprintf("%x:%x", int(x / 65536), x % 65536) : sprintf("%x", x)
      print "---\napiVersion: v1\nkind: Service\nmetadata: {name: s" i ", namespace: default}\nspec:" > f
      print "  clusterIP: 10.96." a "." b > f
      if (fams == "dual") {
        print "  clusterIPs: [10.96." a "." b ", \"fd00:10:96::" x "\"]" > f
        print "  ipFamilyPolicy: RequireDualStack\n  ipFamilies: [IPv4, IPv6]" > f
      }
      print "  ports:\n  - {name: http, protocol: TCP, port: 80, targetPort: 8080}" > f
      print "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice" > f
      print "metadata:\n  name: s" i "-1\n  namespace: default\n  labels: {kubernetes.io/service-name: s" i "}" > f
      print "addressType: IPv4\nports:\n- {name: http, protocol: TCP, port: 8080}\nendpoints:" > f
      for (j = 0; j < 10; j++)
        print "- {addresses: [10." 128 + j "." a "." b "], conditions: {ready: true}, nodeName: " node "}" > f
      if (fams != "dual") continue
      print "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice" > f
      print "metadata:\n  name: s" i "-v6\n  namespace: default\n  labels: {kubernetes.io/service-name: s" i "}" > f
      print "addressType: IPv6\nports:\n- {name: http, protocol: TCP, port: 8080}\nendpoints:" > f
      for (j = 0; j < 10; j++)
        print "- {addresses: [\"fd00:10:" 128 + j "::" x "\"], conditions: {ready: true}, nodeName: " node "}" > f
    }
    close(f)
  }'
}
# emit NAME...: each /tmp/NAME.pprof onto the console, for the host to take.
emit() {
  for p in "$@"; do
    [ -f /tmp/$p.pprof ] || continue
    echo "coldstart-profile-begin $p"; base64 /tmp/$p.pprof; echo "coldstart-profile-end $p"
  done
}
clean() {
  kube-ipvs cleanup --kube-proxy >/dev/null 2>&1
  ipvsadm -C; iproute2-ip link del kube-ipvs0 2>/dev/null
}
# ratio N BINDING: dual ÷ ipv4 for the two starts' results (wall seconds,
# sync seconds, user + system CPU seconds, operations), when both ran and
# succeeded.
ratio() {
  [ -f /tmp/result-$1-$2-ipv4 ] && [ -f /tmp/result-$1-$2-dual ] || return 0
  cat /tmp/result-$1-$2-ipv4 /tmp/result-$1-$2-dual | awk -v n=$1 -v binding=$2 '
    function r(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "-" }
    NR == 1 { w = $1; s = $2; c = $3; o = $4 }
    NR == 2 { print "coldstart: ratio n=" n " binding=" binding " dual/ipv4 wall=" r($1, w) " sync=" r($2, s) " cpu=" r($3, c) " ops=" r($4, o) }'
}
# Only a run asking for other families than ipv4 alone names the family set
# on its lines, so that the default's lines read as they always have.
[ "$COLDSTART_FAMILIES" = ipv4 ] || named=1
nbindings=$(echo $COLDSTART_BINDINGS | wc -w)
lastfams=$(echo $COLDSTART_FAMILIES | awk '{print $NF}')
rm -f /tmp/result-*
# Each N with each family set (N:FAMILIES, in that order), then each binding.
for nf in $(for n in $COLDSTART_NS; do for f in $COLDSTART_FAMILIES; do echo $n:$f; done; done); do
  n=${nf%:*}; fams=${nf#*:}
  at="n=$n"; [ -n "${named:-}" ] && at="n=$n families=$fams"
  k=1; [ $fams = dual ] && k=2
  if [ $fams = dual ] && [ "$(cat /proc/sys/net/ipv6/conf/default/disable_ipv6 2>/dev/null)" != 0 ]; then
    echo "coldstart: $at skipped: IPv6 is missing or disabled in this kernel"
    continue
  fi
  manifests "$n" "$fams"
  for binding in $COLDSTART_BINDINGS; do
    clean
    # IPVS keeps deleted real servers in a trash list for two to four
    # minutes and walks the whole list on every real server added: a
    # start right after the last one's table was cleaned pays for it.
    [ -n "${started:-}" ] && sleep "$COLDSTART_SETTLE"
    started=1
    # tag names this start's profiles: N, preceded by the family set and
    # the binding when the run has several.
    tag=$n
    [ -n "${named:-}" ] && tag=$fams-$tag
    [ "$nbindings" -gt 1 ] && tag=$binding-$tag
    prof=""
    [ "${COLDSTART_PROFILE:-0}" = 1 ] && prof="--cpu-profile /tmp/cpu-$tag.pprof --heap-profile /tmp/heap-$tag.pprof"
    rusage -o /tmp/time.log kube-ipvs agent --manifests $M --once --hostname-override $NODE --log-level info --log-format json $prof \
      --vip-binding $binding >/tmp/agent.log 2>&1
    rc=$?
    vs=$(grep -c '^TCP' /proc/net/ip_vs)
    rs=$(grep -c -- '->' /proc/net/ip_vs)
    addrs=$(iproute2-ip -o addr show dev kube-ipvs0 | wc -l)
    routes=$( (iproute2-ip -4 route show table local dev kube-ipvs0 proto 243; iproute2-ip -6 route show table local dev kube-ipvs0 proto 243) | wc -l)
    ops=$(grep -o '"ops":[0-9]*' /tmp/agent.log | tail -1 | cut -d: -f2)
    # the sync alone (translate, plan, apply), apart from reading the files
    took=$(seconds "$(grep -o '"took":"[^"]*"' /tmp/agent.log | tail -1 | cut -d'"' -f4)")
    wall=$(sed -n 's/^wall_s=//p' /tmp/time.log)
    user=$(sed -n 's/^user_s=//p' /tmp/time.log)
    sys=$(sed -n 's/^sys_s=//p' /tmp/time.log)
    rss=$(sed -n 's/^maxrss_kb=//p' /tmp/time.log)
    echo "coldstart: $at binding=$binding rc=$rc ops=$ops sync_s=$took wall=$wall user=$user sys=$sys maxrss_kb=$rss vs=$vs reals=$rs addrs=$addrs routes=$routes"
    [ $rc -eq 0 ] || tail -5 /tmp/agent.log
    # A table short of what the manifests ask for (a family not
    # programmed) is no measurement of them. reals above counts the
    # file's "-> RemoteAddress:Port" heading too; reals here does not.
    vs6=$(grep -c '^TCP  \[' /proc/net/ip_vs)
    reals=$(grep -- '->' /proc/net/ip_vs | grep -vc RemoteAddress)
    if [ $vs -ne $((k * n)) ] || [ $reals -ne $((10 * k * n)) ] || [ $((addrs + routes)) -ne $((k * n)) ]; then
      echo "coldstart: $at binding=$binding short: want vs=$((k * n)) reals=$((10 * k * n)) vips=$((k * n)), got vs=$vs (IPv6 $vs6) reals=$reals vips=$((addrs + routes))"
    elif [ $rc -eq 0 ]; then
      echo "$wall $took $(awk -v u="$user" -v s="$sys" 'BEGIN{print u + s}') $ops" >/tmp/result-$n-$binding-$fams
    fi
    [ -n "$prof" ] && emit cpu-$tag heap-$tag
    # The agent again, on the table it left, for COLDSTART_RESYNC seconds:
    # its first sync and its periodic resyncs read the whole kernel.
    if [ "${COLDSTART_RESYNC:-0}" -gt 0 ]; then
      prof=""
      [ "${COLDSTART_PROFILE:-0}" = 1 ] && prof="--cpu-profile /tmp/cpu-resync-$tag.pprof --heap-profile /tmp/heap-resync-$tag.pprof"
      kube-ipvs agent --manifests $M --hostname-override $NODE --log-level info --log-format json $prof >/tmp/resync.log 2>&1 &
      pid=$!
      sleep "$COLDSTART_RESYNC"
      cpu=$(awk '{printf "%.2f", ($14 + $15 + $16 + $17) / 100}' /proc/$pid/stat)
      kill -TERM $pid; wait $pid
      grep -o '"full": *true[^}]*"took": *"[^"]*"' /tmp/resync.log | sed "s/^/coldstart: resync $at /"
      echo "coldstart: resync $at seconds=$COLDSTART_RESYNC cpu_s=$cpu"
      [ -n "$prof" ] && emit cpu-resync-$tag heap-resync-$tag
    fi
    # The rescan's read of the table the agent left: first the whole read
    # alone with a CPU profile, then each part.
    if [ "${COLDSTART_SCAN:-0}" = 1 ]; then
      KUBE_IPVS_SCAN_BENCH=1 linux.test -test.run '^$' -test.bench '^BenchmarkScanKernel$/^scan$' -test.benchtime 3x \
        -test.cpuprofile /tmp/cpu-scan-$tag.pprof | grep '^Benchmark' | sed "s/^/coldstart: $at /"
      KUBE_IPVS_SCAN_BENCH=1 linux.test -test.run '^$' -test.bench '^BenchmarkScanKernel$' -test.benchtime 3x \
        | grep '^Benchmark' | sed "s/^/coldstart: $at /"
      emit cpu-scan-$tag
      for round in 1 2; do
        for t in $COLDSTART_SCAN_REFS this; do
          bin=linux.test-$t; [ $t = this ] && bin=linux.test
          KUBE_IPVS_SCAN_BENCH=1 $bin -test.run '^$' -test.bench '^BenchmarkScanKernel$/^scan$' -test.benchtime 3x \
            | grep '^Benchmark' | sed "s/^/coldstart: $at build=$t round=$round /"
        done
      done
    fi
  done
  # Every family set of this N has run.
  if [ $fams = $lastfams ]; then
    for binding in $COLDSTART_BINDINGS; do ratio $n $binding; done
  fi
done

# VIPs: N addresses on a dummy link, then N local routes on it (the
# alternative), a thousand per `ip -batch`, each step timed.
if [ "${COLDSTART_VIPS:-0}" = 1 ]; then
  max=0; for n in $COLDSTART_NS; do [ "$n" -gt $max ] && max=$n; done
  clean
  iproute2-ip link add vipbench type dummy; iproute2-ip link set vipbench up
  batch() { # kind from to: the ip -batch lines for addresses from..to-1
    awk -v k="$1" -v s="$2" -v e="$3" 'BEGIN { for (i = s; i < e; i++) {
      a = "10.96." int(i / 250) "." (i % 250 + 1)
      a6 = "fd00::" sprintf("%x", i + 1)
      if (k == "addr") print "addr add " a "/32 dev vipbench"
      else if (k == "route") print "route add local " a " dev vipbench table local"
      else if (k == "addr6") print "addr add " a6 "/128 dev vipbench nodad"
      else print "route add local " a6 " dev vipbench table local" } }' >/tmp/b.txt
  }
  for kind in addr route addr6 route6; do
    i=0
    while [ $i -lt $max ]; do
      batch $kind $i $((i + 1000))
      t0=$(awk '{print $1}' /proc/uptime)
      fam=-4; case $kind in *6) fam=-6 ;; esac
      iproute2-ip $fam -batch /tmp/b.txt || echo "coldstart: vips $kind batch at $i failed"
      t1=$(awk '{print $1}' /proc/uptime)
      i=$((i + 1000))
      echo "coldstart: vips kind=$kind upto=$i seconds=$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.2f", b - a}')"
    done
    iproute2-ip link del vipbench; iproute2-ip link add vipbench type dummy; iproute2-ip link set vipbench up
  done
fi
GUEST

log="$work/console.log"
KUBE_IPVS_VM_LOG="$log" "$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-3600}" --mem "${KUBE_IPVS_VM_MEM:-2048}" "${adds[@]}" \
  --env "COLDSTART_NS=${ns[*]}" --env "COLDSTART_PROFILE=${COLDSTART_PROFILE:-0}" --env "COLDSTART_RESYNC=${COLDSTART_RESYNC:-0}" \
  --env "COLDSTART_VIPS=${COLDSTART_VIPS:-0}" --env "COLDSTART_SCAN=${COLDSTART_SCAN:-0}" \
  --env "COLDSTART_SCAN_REFS=${COLDSTART_SCAN_REFS:-}" --env "COLDSTART_BINDINGS=${COLDSTART_BINDINGS:-address}" \
  --env "COLDSTART_SETTLE=${COLDSTART_SETTLE:-240}" --env "COLDSTART_FAMILIES=$(echo $families)" \
  -- sh /guest.sh | grep -v -e '^coldstart-profile' -e '^[A-Za-z0-9+/=]\{40,\}$' || true
# Every profile the guest put on the console, by the name it gave it (one
# name a start: see tag in the guest).
for p in $(sed -n 's/^coldstart-profile-begin //p' "$log" | sort -u); do
  sed -n "/^coldstart-profile-begin $p\$/,/^coldstart-profile-end $p\$/p" "$log" | sed '1d;$d' | base64 -d >"$root/bin/coldstart-$p.pprof"
  echo "coldstart-vm: profile $p in bin/coldstart-$p.pprof"
done
grep '^coldstart:' "$log" >"$root/bin/coldstart.txt" || true
