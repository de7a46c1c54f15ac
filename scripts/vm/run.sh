#!/usr/bin/env bash
# run.sh: run one command inside a throwaway VM booted on a real IPVS kernel.
#
#   run.sh [--timeout SECS] [--mem MB] [--add HOSTPATH:GUESTPATH]... [--env K=V]...
#          [--fwd GUESTPORT:HOSTPORT]... -- GUEST-COMMAND [ARGS...]
#
# Exits with the guest command's exit status. If the VM never reports one (boot
# failure, host-side timeout) it prints why and exits 125: a harness failure is
# never a pass or a skip. See README.md for the guest environment.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() { echo "run.sh: error: $*" >&2; exit 125; }

timeout_s=600
mem=1024
adds=()
envs=()
fwds=()
while [ $# -gt 0 ]; do
  case "$1" in
  --timeout) timeout_s=${2:?--timeout needs SECS}; shift 2 ;;
  --mem) mem=${2:?--mem needs MB}; shift 2 ;;
  --add) adds+=("${2:?--add needs HOSTPATH:GUESTPATH}"); shift 2 ;;
  --env) envs+=("${2:?--env needs K=V}"); shift 2 ;;
  --fwd) fwds+=("${2:?--fwd needs GUESTPORT:HOSTPORT}"); shift 2 ;;
  --) shift; break ;;
  -h | --help) usage ;;
  *) echo "run.sh: unknown argument: $1" >&2; usage ;;
  esac
done
[ $# -gt 0 ] || { echo "run.sh: no guest command" >&2; usage; }
[[ "$timeout_s" =~ ^[0-9]+$ ]] || die "--timeout must be whole seconds"
[[ "$mem" =~ ^[0-9]+$ ]] || die "--mem must be MB"
if [ -n "${KUBE_IPVS_VM_FWD:-}" ]; then
  IFS=, read -r -a extra <<<"$KUBE_IPVS_VM_FWD"
  fwds+=("${extra[@]}")
fi
net=${KUBE_IPVS_VM_NET:-0}
[ ${#fwds[@]} -gt 0 ] && net=1

# Single-quotes one word for the guest's POSIX sh.
shquote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

vmdir=$("$here/prepare.sh" | sed -n 's/^KUBE_IPVS_VM_DIR=//p' | tail -n1)
[ -n "$vmdir" ] && [ -f "$vmdir/base.cpio.gz" ] || die "prepare.sh did not produce a VM dir"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
payload="$work/payload"
mkdir -p "$payload/etc/kube-ipvs-vm"

# --- payload: added files, the command, its settings ----------------------------
for spec in "${adds[@]}"; do
  src=${spec%%:*}
  dst=${spec#*:}
  [ "$src" != "$spec" ] || die "--add $spec: want HOSTPATH:GUESTPATH"
  [ -e "$src" ] || die "--add $spec: $src does not exist"
  case "$dst" in /*) ;; *) die "--add $spec: GUESTPATH must be absolute" ;; esac
  mkdir -p "$payload$(dirname "$dst")"
  cp -aL "$src" "$payload$dst"
done

{
  echo '#!/bin/sh'
  printf 'exec'
  for word in "$@"; do printf ' %s' "$(shquote "$word")"; done
  echo
} >"$payload/run-this"
chmod 755 "$payload/run-this"

# Leave the guest a margin to report its own timeout before the host kills qemu.
cmd_timeout=$((timeout_s > 60 ? timeout_s - 30 : timeout_s / 2))
{
  echo "export KUBE_IPVS_VM=1"
  echo "KUBE_IPVS_VM_CMD_TIMEOUT=$cmd_timeout"
  echo "KUBE_IPVS_VM_NET=$net"
  for kv in "${envs[@]}"; do
    k=${kv%%=*}
    [[ "$k" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && [ "$k" != "$kv" ] || die "--env $kv: want NAME=VALUE"
    echo "export $k=$(shquote "${kv#*=}")"
  done
} >"$payload/etc/kube-ipvs-vm/env"

# Linux unpacks concatenated gzipped cpio archives in order, so the cached base
# stays untouched and only this small payload is packed per run.
(cd "$payload" && find . | cpio -o -H newc --quiet -R 0:0 | gzip -1) >"$work/payload.cpio.gz"
cat "$vmdir/base.cpio.gz" "$work/payload.cpio.gz" >"$work/initrd.gz"

# --- boot -------------------------------------------------------------------------
netargs=(-nic none)
if [ "$net" = 1 ]; then
  netdev="user,id=n0,restrict=on"
  for f in "${fwds[@]}"; do
    gp=${f%%:*}
    hp=${f#*:}
    [[ "$gp" =~ ^[0-9]+$ && "$hp" =~ ^[0-9]+$ ]] || die "--fwd $f: want GUESTPORT:HOSTPORT"
    # cmd: form: one socat per connection, so several guest clients work at once.
    netdev+=",guestfwd=tcp:10.0.2.100:$gp-cmd:socat - TCP:127.0.0.1:$hp"
  done
  # romfile= drops the iPXE option ROM: nothing boots from the network.
  netargs=(-netdev "$netdev" -device virtio-net-pci,netdev=n0,romfile=)
fi

log="$work/console.log"
start=$(date +%s)
set +e
# stdin from /dev/null: the guest needs no input, and qemu would otherwise put a
# terminal into raw mode and leave it there if the timeout kills it.
timeout -k 5 "$timeout_s" qemu-system-x86_64 \
  -accel tcg -cpu max -smp 2 -m "$mem" -nographic -no-reboot \
  -kernel "$vmdir/vmlinuz" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1" \
  "${netargs[@]}" </dev/null 2>&1 |
  sed -u -e 's/\r$//' -e 's/\x1bc//g' -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' | tee "$log"
qemu_rc=${PIPESTATUS[0]}
set -e
elapsed=$(($(date +%s) - start))
[ -n "${KUBE_IPVS_VM_LOG:-}" ] && cp "$log" "$KUBE_IPVS_VM_LOG"

rc=$(sed -n 's/^KUBE-IPVS-VM-EXIT=\([0-9][0-9]*\)$/\1/p' "$log" | tail -n1)
if [ -z "$rc" ]; then
  if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
    die "VM gave no exit marker within ${timeout_s}s (host timeout); see console output above"
  fi
  die "VM ended after ${elapsed}s without an exit marker (qemu status $qemu_rc): boot or /init failure; see console output above"
fi
echo "run.sh: guest command exited $rc after ${elapsed}s in the VM" >&2
exit "$rc"
