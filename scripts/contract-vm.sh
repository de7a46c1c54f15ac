#!/usr/bin/env bash
# contract-vm.sh: run the dataplane contract suite against the linux dataplane
# on a real IPVS kernel, inside a throwaway VM (scripts/vm/run.sh).
#
#   scripts/contract-vm.sh [go test flags for the guest, e.g. -test.run Addresses]
#
# KUBE_IPVS_REQUIRE_KERNEL=1 in the guest turns every "no IPVS here" skip into a
# failure, so this can only pass by running the suite. Exits with the test's
# status (125 when the VM itself failed).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$root" && CGO_ENABLED=0 go test -c -o "$work/linux.test" ./internal/dataplane/linux)
# The announcements' test adds tables of other families with nft.
mapfile -t adds < <("$root/scripts/vm/nft-adds.sh")
exec "$root/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-900}" "${adds[@]}" \
  --add "$work/linux.test:/usr/local/bin/linux.test" \
  -- env KUBE_IPVS_REQUIRE_KERNEL=1 /usr/local/bin/linux.test -test.v "$@"
