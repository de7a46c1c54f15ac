#!/usr/bin/env bash
# conntrack-bench-vm.sh: run BenchmarkClearConntrack (internal/dataplane/linux)
# on the VM's kernel (scripts/vm/run.sh): one clear of the UDP entries of 200
# removed real servers in a conntrack table of KUBE_IPVS_CT_ENTRIES entries
# (default 200000), KUBE_IPVS_CT_UDP of them UDP (default half). Prints the
# benchmark's numbers; it is a measurement, not a pass/fail on time.
#
#   scripts/conntrack-bench-vm.sh [flags for the test binary, e.g. -test.benchtime 3x]
#
# The guest gets nf_conntrack_max and the hash size raised for the table.
# Exits with the benchmark's status: non-zero when it failed, was skipped,
# or printed no result (125 when the VM itself failed).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
entries=${KUBE_IPVS_CT_ENTRIES:-200000}
udp=${KUBE_IPVS_CT_UDP:-$((entries / 2))}
[[ "$entries" =~ ^[0-9]+$ && "$udp" =~ ^[0-9]+$ ]] || { echo "conntrack-bench-vm.sh: KUBE_IPVS_CT_ENTRIES and KUBE_IPVS_CT_UDP must be numbers" >&2; exit 2; }
# Room for the table twice over, and a hash of a quarter of that: a table
# many times its hash size would measure long bucket chains.
max=262144
while [ "$max" -lt $((2 * entries)) ]; do max=$((2 * max)); done
hashsize=$((max / 4))

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && CGO_ENABLED=0 go test -trimpath -c -o "$work/linux.test" ./internal/dataplane/linux)

# The guest's sh is busybox ash.
cat >"$work/bench.sh" <<GUEST
#!/bin/sh
echo $max >/proc/sys/net/netfilter/nf_conntrack_max || exit 1
echo $hashsize >/sys/module/nf_conntrack/parameters/hashsize || exit 1
echo "conntrack: max=\$(cat /proc/sys/net/netfilter/nf_conntrack_max) hashsize=\$(cat /sys/module/nf_conntrack/parameters/hashsize)"
exec /usr/local/bin/linux.test -test.run '^\$' -test.bench '^BenchmarkClearConntrack\$' \\
  -test.benchtime 1x -test.benchmem -test.v -test.timeout 0 "\$@"
GUEST
chmod 755 "$work/bench.sh"

set +e
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-1800}" --mem "${KUBE_IPVS_VM_MEM:-2048}" \
  --add "$work/linux.test:/usr/local/bin/linux.test" \
  --add "$work/bench.sh:/usr/local/bin/conntrack-bench.sh" \
  --env "KUBE_IPVS_CT_ENTRIES=$entries" --env "KUBE_IPVS_CT_UDP=$udp" --env KUBE_IPVS_REQUIRE_KERNEL=1 \
  -- /usr/local/bin/conntrack-bench.sh "$@" | tee "$work/out"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" = 0 ] && ! grep -q 'deleted/op' "$work/out"; then
  echo "conntrack-bench-vm.sh: the benchmark printed no result" >&2
  rc=1
fi
exit "$rc"
