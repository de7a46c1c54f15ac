#!/usr/bin/env bash
# agent-vm.sh: run the kube-ipvs agent itself on a real IPVS kernel, inside a
# throwaway VM (scripts/vm/run.sh), against the example manifests:
#   1. `agent --manifests examples --once` programs the table; `ipvsadm -Ln`
#      must equal scripts/testdata/agent-once.ipvsadm;
#   2. a second agent against the unchanged folder plans nothing (`--dry-run`
#      prints no operation): restart is free;
#   3. `cleanup` removes everything the agent made, the link included, and
#      leaves a virtual server added by hand (as keepalived would) alone.
# Set UPDATE=1 to rewrite the golden file from what the kernel printed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
golden="$root/scripts/testdata/agent-once.ipvsadm"

(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/kube-ipvs" ./cmd/kube-ipvs)
cp "$golden" "$work/expected.ipvsadm" 2>/dev/null || : >"$work/expected.ipvsadm"

cat >"$work/guest.sh" <<'GUEST'
set -u
fail() { echo "agent-vm: FAIL: $*"; exit 1; }
# The kernel lists services in hash-table order, and the hash mixes in a
# per-boot value: sort whole service blocks (a service line with its real
# servers) so the comparison does not depend on the boot.
blocks() {
  tab=$(printf '\t')
  awk '/^(TCP|UDP|SCTP|FWM) /{svc=$0} {print (svc=="" ? "0" : "1 " svc) "\t" $0}' "$1" |
    sort -s -t "$tab" -k1,1 | cut -f2-
}
kube-ipvs agent --manifests /examples --once --hostname-override node-a --log-level info \
  || fail "agent --once exited $?"
ipvsadm -Ln >/tmp/got.ipvsadm
echo "--- ipvsadm -Ln after agent --once"
cat /tmp/got.ipvsadm
echo "--- golden:begin"; cat /tmp/got.ipvsadm; echo "--- golden:end"
blocks /expected.ipvsadm >/tmp/want.sorted
blocks /tmp/got.ipvsadm >/tmp/got.sorted
diff -u /tmp/want.sorted /tmp/got.sorted || fail "ipvsadm -Ln differs from the golden file"
iproute2-ip -o addr show dev kube-ipvs0 | grep -q '10.96.0.100/32' || fail "VIP 10.96.0.100 not bound on kube-ipvs0"

plan=$(kube-ipvs agent --manifests /examples --dry-run --hostname-override node-a --log-level error) \
  || fail "dry-run exited $?"
[ -z "$plan" ] || fail "a second agent against the same folder planned operations: $plan"
echo "--- restart plans zero operations"

ipvsadm -A -t 192.0.2.1:443 -s wlc
kube-ipvs cleanup --log-level error >/tmp/cleanup.txt || fail "cleanup exited $?"
left=$(ipvsadm -Sn)
[ "$left" = "-A -t 192.0.2.1:443 -s wlc" ] || fail "after cleanup the table holds: $left"
iproute2-ip link show kube-ipvs0 >/dev/null 2>&1 && fail "kube-ipvs0 still exists after cleanup"
echo "--- cleanup removed $(wc -l </tmp/cleanup.txt) virtual servers and the link; the foreign one survived"
echo "agent-vm: PASS"
GUEST

adds=(--add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" --add "$work/guest.sh:/guest.sh"
  --add "$work/expected.ipvsadm:/expected.ipvsadm")
for f in "$root"/examples/*.yaml; do adds+=(--add "$f:/examples/$(basename "$f")"); done

set +e
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-600}" "${adds[@]}" -- sh /guest.sh | tee "$work/console.log"
rc=${PIPESTATUS[0]}
set -e
if [ "${UPDATE:-0}" = 1 ]; then
  sed -n '/^--- golden:begin/,/^--- golden:end/p' "$work/console.log" | sed '1d;$d' | tr -d '\r' >"$golden"
  echo "agent-vm: golden file rewritten: $golden"
fi
exit "$rc"
