#!/usr/bin/env bash
# fault-vm.sh: the agent under faults on a real IPVS kernel, in a throwaway VM
# (scripts/vm/run.sh). The guest side is e2e/fault/guest.sh:
#   1. kill: thousands of Services from a manifest folder and keepalived-like
#      foreign virtual servers, ipset and iptables rules; the agent SIGKILLed
#      at random points of its sync and restarted, Services deleted between
#      kills; then it must converge with zero orphans (table, VIPs, set
#      members) and the foreign state untouched;
#   2. lock: /run/xtables.lock held (legacy iptables) while the agent wants
#      to rewrite its rules; /healthz and /metrics must keep answering and
#      the agent must converge after the release.
# Kernel-operation failures through the fake are
# internal/reconciler/fault_test.go.
#
# Settings (environment): FAULT_SERVICES (1000), FAULT_KILLS (5),
# FAULT_MAX_DELAY_MS (40000: each kill lands up to this long after the
# restarted agent first changes the table; the first within a sixth of it,
# while virtual servers are still being created),
# FAULT_LOCK_HOLD (40 s), FAULT_SEED (random; printed, to replay a run).
# KUBE_IPVS_VM_TIMEOUT bounds the VM (1800 s: a run with the defaults takes
# minutes under emulation, more on a loaded machine).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs" ./cmd/kube-ipvs)

# The legacy iptables backend, the one that serializes on /run/xtables.lock
# (the VM's base image has only the nft one), and flock(1) to hold the lock.
adds=(--add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" --add "$root/e2e/fault/guest.sh:/guest.sh"
  --add "$(command -v flock):/usr/local/bin/flock")
legacy=$(command -v xtables-legacy-multi || echo /usr/sbin/xtables-legacy-multi)
[ -x "$legacy" ] || { echo "fault-vm: needs xtables-legacy-multi (apt iptables)" >&2; exit 1; }
adds+=(--add "$legacy:/usr/local/sbin/xtables-legacy-multi")
for lib in $(ldd "$legacy" | grep -o '/[^ ]*libip[46]tc[^ ]*'); do
  adds+=(--add "$lib:$lib")
done
# One copy per name: the multi-call binary picks its tool from argv[0].
for l in iptables-legacy iptables-legacy-save iptables-legacy-restore ip6tables-legacy ip6tables-legacy-save ip6tables-legacy-restore; do
  adds+=(--add "$legacy:/usr/local/sbin/$l")
done

envs=()
for v in FAULT_SERVICES FAULT_KILLS FAULT_MAX_DELAY_MS FAULT_LOCK_HOLD FAULT_SEED; do
  [ -n "${!v:-}" ] && envs+=(--env "$v=${!v}")
done

start=$(date +%s)
rc=0
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-1800}" --mem 1536 "${adds[@]}" ${envs[@]+"${envs[@]}"} \
  -- sh /guest.sh || rc=$?
echo "fault-vm: exit $rc after $(($(date +%s) - start)) s" >&2
exit "$rc"
