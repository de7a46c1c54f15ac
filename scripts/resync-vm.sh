#!/usr/bin/env bash
# resync-vm.sh: what full resyncs cost, in the IPVS VM (scripts/vm/run.sh),
# for one or more agent builds one after the other on the same boot, from a
# manifest folder of N Services x 10 endpoints: cold start, idle CPU, the
# latency of changes, how long someone else's changes take to be repaired,
# peak RSS. The guest side is e2e/resync/guest.sh.
#
#   scripts/resync-vm.sh                 # this tree's agent only
#   scripts/resync-vm.sh REV...          # and the agent at each git revision, first
#
# Settings (environment): RESYNC_SERVICES (10000), RESYNC_IDLE (60 s),
# RESYNC_CHANGES (20), RESYNC_REPAIR_LIMIT (900 s: at 10k a read takes seconds, and the
# checker waits up to 100 reads' cost after one), RESYNC_VM_MEM (2048 MB; 50,000
# Services want 4096 or more), KUBE_IPVS_VM_TIMEOUT (3600 s). Not part of make test:
# at 10,000 Services it takes tens of minutes under emulation.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

adds=(--add "$root/e2e/resync/guest.sh:/guest.sh")
tools=()
for rev in "$@"; do
  mkdir "$work/src-$rev"
  git -C "$root" archive "$rev" | tar -x -C "$work/src-$rev"
  (cd "$work/src-$rev" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs-$rev" ./cmd/kube-ipvs)
  adds+=(--add "$work/kube-ipvs-$rev:/usr/local/bin/kube-ipvs-$rev")
  tools+=("$rev")
done
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs-new" ./cmd/kube-ipvs)
adds+=(--add "$work/kube-ipvs-new:/usr/local/bin/kube-ipvs-new")
tools+=(new)

envs=(--env "RESYNC_TOOLS=${tools[*]}")
for v in RESYNC_SERVICES RESYNC_IDLE RESYNC_CHANGES RESYNC_REPAIR_LIMIT; do
  [ -n "${!v:-}" ] && envs+=(--env "$v=${!v}")
done
start=$(date +%s)
rc=0
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-3600}" --mem "${RESYNC_VM_MEM:-2048}" "${adds[@]}" "${envs[@]}" \
  -- sh /guest.sh || rc=$?
echo "resync-vm: exit $rc after $(($(date +%s) - start)) s (load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
exit "$rc"
