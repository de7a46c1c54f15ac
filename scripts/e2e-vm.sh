#!/usr/bin/env bash
# e2e-vm.sh (`make e2e`): the end-to-end suite (e2e/) on a real IPVS kernel,
# inside a throwaway VM (scripts/vm/run.sh). Builds the agent, the echo
# backend and the suite as static binaries, boots the VM and runs the suite
# there verbosely, so every scenario's measurements are printed.
#
# KUBE_IPVS_REQUIRE_KERNEL=1 is set in the guest: a suite that cannot reach
# IPVS fails rather than skips; a VM that does not boot fails too (run.sh
# exits 125). E2E_RUN=REGEXP runs a subset (go test -run);
# KUBE_IPVS_AGENT=FILE uses a prebuilt static agent instead of building one.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

echo "==> building kube-ipvs, echo and the e2e suite (static)"
(
  cd "$root"
  if [ -n "${KUBE_IPVS_AGENT:-}" ]; then
    cp "$KUBE_IPVS_AGENT" "$work/kube-ipvs" # a prebuilt static agent
  else
    CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/kube-ipvs" ./cmd/kube-ipvs
  fi
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/echo-server" ./e2e/tools/echo
  CGO_ENABLED=0 go test -c -trimpath -ldflags '-s -w' -o "$work/e2e.test" ./e2e
)
echo "    built in $(($(date +%s) - start))s"

args=(-test.v -test.count=1 -test.timeout "${E2E_TIMEOUT:-18m}")
[ -n "${E2E_RUN:-}" ] && args+=(-test.run "$E2E_RUN")

echo "==> booting the VM; the suite runs inside"
set +e
"$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-1500}" \
  --add "$work/kube-ipvs:/usr/local/bin/kube-ipvs" \
  --add "$work/echo-server:/usr/local/bin/echo-server" \
  --add "$work/e2e.test:/usr/local/bin/e2e.test" \
  --env KUBE_IPVS_REQUIRE_KERNEL=1 \
  -- /usr/local/bin/e2e.test "${args[@]}"
rc=$?
echo "==> e2e exited $rc after $(($(date +%s) - start))s"
exit "$rc"
