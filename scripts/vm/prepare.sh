#!/usr/bin/env bash
# prepare.sh: make sure everything a throwaway IPVS VM needs is present and cached.
#
# Installs the host tools that are missing, fetches Debian's cloud kernel (it ships
# IPVS and every scheduler as modules, unlike the host kernel), and builds a cached
# BASE initramfs holding busybox, the dynamic network tools with their libraries,
# the kernel modules subset and /init. The per-run payload (test binaries and the
# command) is a second cpio built by run.sh, so this base is reused across runs.
#
# Prints the cache dir on stdout as the last line: KUBE_IPVS_VM_DIR=<dir>.
# That dir holds vmlinuz, base.cpio.gz and version.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root="${KUBE_IPVS_CACHE:-$HOME/.cache/kube-ipvs}/vm"

log() { echo "prepare: $*" >&2; }
die() { echo "prepare: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (installs packages, creates device nodes)"

# --- host packages --------------------------------------------------------
# Package -> a file it provides, so a present tool skips dpkg/apt entirely.
pkgs=(
  "qemu-system-x86:/usr/bin/qemu-system-x86_64"
  "busybox-static:/bin/busybox"
  "cpio:/usr/bin/cpio"
  "kmod:/usr/sbin/depmod"
  "ipvsadm:/usr/sbin/ipvsadm"
  "ipset:/usr/sbin/ipset"
  "iptables:/usr/sbin/xtables-nft-multi"
  "conntrack:/usr/sbin/conntrack"
  "iproute2:/usr/sbin/ip"
  "socat:/usr/bin/socat"
)

install_missing() {
  local missing=() entry
  for entry in "${pkgs[@]}"; do
    [ -e "${entry#*:}" ] || missing+=("${entry%%:*}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  # Try with the existing package lists first; update only if that fails.
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
  fi
}

# --- kernel ------------------------------------------------------------------
# Prints the current cloud kernel version (e.g. 6.1.0-57-cloud-amd64). When apt
# cannot answer (offline, no lists) fall back to the newest cached kernel.
kernel_version() {
  # apt-cache takes seconds; trust the last answer for a day so cached runs stay
  # fast. KUBE_IPVS_VM_REFRESH=1 asks apt again.
  local memo="$cache_root/current-version"
  if [ "${KUBE_IPVS_VM_REFRESH:-0}" != 1 ] && [ -n "$(find "$memo" -mmin -1440 2>/dev/null)" ]; then
    cat "$memo"
    return 0
  fi
  local ver
  ver=$(resolve_kernel_version)
  echo "$ver" >"$memo"
  echo "$ver"
}

resolve_kernel_version() {
  local pkg
  pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
    awk '/Depends: linux-image-.*-cloud-amd64/ {print $2; exit}') || true
  if [ -z "$pkg" ]; then
    apt-get update >&2 || true
    pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
      awk '/Depends: linux-image-.*-cloud-amd64/ {print $2; exit}') || true
  fi
  if [ -n "$pkg" ]; then
    echo "${pkg#linux-image-}"
    return 0
  fi
  local newest
  newest=$(ls -1 "$cache_root" 2>/dev/null | grep -- '-cloud-amd64$' | sort -V | tail -n1) || true
  [ -n "$newest" ] || die "cannot resolve linux-image-cloud-amd64 and nothing is cached"
  log "apt cannot resolve the cloud kernel; using cached $newest"
  echo "$newest"
}

fetch_kernel() { # $1 version, $2 dir
  local ver=$1 dir=$2
  [ -f "$dir/kernel/boot/vmlinuz-$ver" ] && return 0
  log "downloading linux-image-$ver"
  local tmp
  tmp=$(mktemp -d)
  chmod 755 "$tmp" # apt's _apt user writes the download here
  (cd "$tmp" && apt-get download "linux-image-$ver" >&2) ||
    die "apt-get download linux-image-$ver failed"
  rm -rf "$dir/kernel.tmp"
  dpkg-deb -x "$tmp"/linux-image-"$ver"_*.deb "$dir/kernel.tmp"
  rm -rf "$tmp" "$dir/kernel"
  mv "$dir/kernel.tmp" "$dir/kernel"
}

# --- base initramfs -------------------------------------------------------------
# Copies a binary plus every library ldd names, at the same paths, into the root.
copy_with_libs() { # $1 root, $2 source, $3 destination inside root
  local root=$1 src=$2 dst=$3 lib
  mkdir -p "$root$(dirname "$dst")"
  cp -L "$src" "$root$dst"
  for lib in $(ldd "$src" 2>/dev/null | grep -o '/[^ ]*'); do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

copy_modules() { # $1 root, $2 kernel version, $3 extracted kernel dir
  local root=$1 ver=$2 kdir=$3 sub src
  src="$kdir/lib/modules/$ver"
  [ -d "$src" ] || die "no modules in $src"
  mkdir -p "$root/lib/modules/$ver/kernel"
  # Only what networking tests need: netfilter/ipvs/ipset (net/), dummy/veth/virtio
  # (drivers/net, drivers/virtio) and their helpers (lib/, crypto/). Wireless and
  # physical NIC drivers are large and useless here.
  for sub in net drivers/net drivers/virtio lib crypto arch/x86/crypto; do
    [ -d "$src/kernel/$sub" ] || continue
    mkdir -p "$root/lib/modules/$ver/kernel/$sub"
    cp -a "$src/kernel/$sub/." "$root/lib/modules/$ver/kernel/$sub/"
  done
  # Every byte is unpacked under TCG at each boot: drop what no test here loads.
  for sub in drivers/net/wireless drivers/net/ethernet drivers/net/usb drivers/net/can \
    net/wireless net/mac80211 net/bluetooth net/sunrpc net/ceph net/tipc net/rds net/smc \
    net/openvswitch net/rxrpc net/9p net/can net/ieee802154 net/mac802154 net/nfc; do
    rm -rf "$root/lib/modules/$ver/kernel/$sub"
  done
  cp "$src"/modules.order "$src"/modules.builtin* "$root/lib/modules/$ver/" 2>/dev/null || true
  depmod -b "$root" "$ver"
}

build_base() { # $1 version, $2 dir
  local ver=$1 dir=$2 root
  root=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" RETURN
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,usr/local/sbin,lib,lib64,etc,proc,sys,dev,tmp,run,root,var/run}

  # Console device: the kernel opens /dev/console before /init runs; without it
  # /init would start with no stdout at all.
  mknod -m 600 "$root/dev/console" c 5 1
  mknod -m 666 "$root/dev/null" c 1 3

  # Real tools first, so busybox links never shadow them on PATH.
  copy_with_libs "$root" /usr/sbin/ipvsadm /usr/sbin/ipvsadm
  copy_with_libs "$root" /usr/sbin/ipset /usr/sbin/ipset
  copy_with_libs "$root" /usr/sbin/conntrack /usr/sbin/conntrack
  copy_with_libs "$root" /usr/sbin/xtables-nft-multi /usr/sbin/xtables-nft-multi
  local l
  for l in iptables iptables-restore iptables-save ip6tables ip6tables-restore ip6tables-save \
    iptables-nft iptables-nft-restore iptables-nft-save ip6tables-nft ip6tables-nft-restore ip6tables-nft-save; do
    ln -s xtables-nft-multi "$root/usr/sbin/$l"
  done
  local so
  for so in /usr/lib/x86_64-linux-gnu/xtables/*.so; do
    copy_with_libs "$root" "$so" "$so"
  done
  # iproute2's ip: /usr/sbin/ip for programs that exec "ip" through PATH, and
  # iproute2-ip for guest shell scripts (busybox sh runs its own small ip applet
  # before PATH, and that one has no netns).
  copy_with_libs "$root" "$(readlink -f /usr/sbin/ip)" /usr/sbin/ip
  ln -s ip "$root/usr/sbin/iproute2-ip"

  cp /bin/busybox "$root/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list-full); do
    local name=${applet##*/}
    # Skip names a real tool already provides anywhere on PATH.
    if [ -e "$root/usr/sbin/$name" ] || [ -e "$root/usr/bin/$name" ] ||
      [ -e "$root/sbin/$name" ] || [ -e "$root/bin/$name" ]; then
      continue
    fi
    ln -s /bin/busybox "$root/$applet"
  done

  cp /etc/protocols "$root/etc/protocols"
  [ -f /etc/services ] && cp /etc/services "$root/etc/services"
  echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
  echo "root:x:0:" >"$root/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
  echo "hosts: files" >"$root/etc/nsswitch.conf"

  copy_modules "$root" "$ver" "$dir/kernel"

  install -m 755 "$here/init.sh" "$root/init"

  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$dir/base.cpio.gz.tmp"
  mv "$dir/base.cpio.gz.tmp" "$dir/base.cpio.gz"
}

# The stamp ties the cached base to the recipe that built it: editing this
# script or init.sh rebuilds the base on the next run.
recipe_stamp() {
  cat "$here/prepare.sh" "$here/init.sh" | sha256sum | cut -d' ' -f1
}

main() {
  mkdir -p "$cache_root"
  # Several test runs may start at once: one builds, the others wait and reuse.
  exec 9>"$cache_root/.lock"
  flock 9
  install_missing
  local ver dir stamp
  ver=$(kernel_version)
  dir="$cache_root/$ver"
  mkdir -p "$dir"
  stamp=$(recipe_stamp)
  if [ -f "$dir/base.cpio.gz" ] && [ -f "$dir/vmlinuz" ] &&
    [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ]; then
    log "cached: $dir"
  else
    fetch_kernel "$ver" "$dir"
    log "building base initramfs for $ver"
    build_base "$ver" "$dir"
    cp "$dir/kernel/boot/vmlinuz-$ver" "$dir/vmlinuz"
    echo "$ver" >"$dir/version"
    echo "$stamp" >"$dir/stamp"
    log "ready: $dir ($(du -h "$dir/base.cpio.gz" | cut -f1) base initramfs)"
  fi
  echo "KUBE_IPVS_VM_DIR=$dir"
}

main "$@"
