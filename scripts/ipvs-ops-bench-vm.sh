#!/usr/bin/env bash
# ipvs-ops-bench-vm.sh: run BenchmarkRollingRealServer (internal/dataplane/linux)
# on the VM's kernel (scripts/vm/run.sh): a virtual server of each size in
# KUBE_IPVS_ROLL_SIZES (default 1000,10000) rolled one endpoint at a time
# (add, weight 0, delete), the time and CPU of each kernel operation, and a
# read of every real server's counters. Prints the benchmark's numbers; it is
# a measurement of what IPVS itself costs, not a pass/fail on time.
#
#   scripts/ipvs-ops-bench-vm.sh [flags for the test binary, e.g. -test.count 3]
#
# Exits with the benchmark's status: non-zero when it failed, was skipped,
# or printed no result (125 when the VM itself failed).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sizes=${KUBE_IPVS_ROLL_SIZES:-1000,10000}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$root" && CGO_ENABLED=0 go test -trimpath -c -o "$work/linux.test" ./internal/dataplane/linux)

set +e
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-1800}" --mem "${KUBE_IPVS_VM_MEM:-2048}" \
  --add "$work/linux.test:/usr/local/bin/linux.test" \
  --env "KUBE_IPVS_ROLL_SIZES=$sizes" --env KUBE_IPVS_REQUIRE_KERNEL=1 \
  -- /usr/local/bin/linux.test -test.run '^$' -test.bench '^BenchmarkRollingRealServer$' \
  -test.benchtime 2s -test.v -test.timeout 0 "$@" | tee "$work/out"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" = 0 ] && ! grep -q 'ns/kernel-op' "$work/out"; then
  echo "ipvs-ops-bench-vm.sh: the benchmark printed no result" >&2
  rc=1
fi
exit "$rc"
