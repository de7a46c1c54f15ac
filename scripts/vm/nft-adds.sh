#!/usr/bin/env bash
# nft-adds.sh: the scripts/vm/run.sh arguments that give the VM the host's nft
# tool with its libraries (the VM's base has none), one per line; installs
# nftables on the host first if it is missing.
#
#   mapfile -t adds < <(scripts/vm/nft-adds.sh)
set -euo pipefail

if ! command -v nft >/dev/null; then
  echo "nft-adds: installing nftables (the nft tool)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >&2 ||
    { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >&2; }
fi
nft_bin=$(command -v nft)
printf '%s\n' --add "$nft_bin:/usr/sbin/nft"
for lib in $(ldd "$nft_bin" | grep -o '/[^ ]*'); do
  case "$lib" in */libc.so.* | */ld-linux*) continue ;; esac # the VM's base has them
  printf '%s\n' --add "$(readlink -f "$lib"):$lib"
done
