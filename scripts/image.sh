#!/usr/bin/env bash
# image.sh: build the DaemonSet's OCI image with no container daemon and no
# image registry.
#
# The root file system is extracted by mmdebstrap from Debian's own packages:
# iptables (xtables-nft-multi and xtables-legacy-multi: the agent's shim runs
# the flavour the node uses), ipset and conntrack (for people debugging a node
# from the pod; the agent itself talks netlink for sets and flows), and their
# libraries. No shell, no apt, no dpkg: nothing runs maintainer scripts in it,
# so the few things they would do are done here (merged-/usr links, the
# iptables alternatives, a dpkg status file for image scanners). The static
# agent goes on top as a second layer; umoci assembles the OCI image layout,
# which is archived as one tar.
#
#   scripts/image.sh [build]      bin/kube-ipvs-image.oci.tar from bin/kube-ipvs (run `make static` first)
#   scripts/image.sh rootfs DIR   only the Debian root file system, into DIR (the Dockerfile uses this)
#   scripts/image.sh unpack DIR   unpack the archive into an OCI runtime bundle: DIR/rootfs, DIR/config.json
#
# The root file system is cached under ${KUBE_IPVS_CACHE:-~/.cache/kube-ipvs}/image
# and rebuilt from Debian's archive when this script changes or after a day
# (KUBE_IPVS_IMAGE_REFRESH=1: now). Must run as root: the files are root's and
# missing tools are installed with apt-get.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cache_root="${KUBE_IPVS_CACHE:-$HOME/.cache/kube-ipvs}/image"
suite=${KUBE_IPVS_IMAGE_SUITE:-trixie}
tag=${KUBE_IPVS_IMAGE_TAG:-dev}
archive=${KUBE_IPVS_IMAGE:-$repo/bin/kube-ipvs-image.oci.tar}
binary=$repo/bin/kube-ipvs

# What the image runs: ENTRYPOINT and CMD, as the Dockerfile says too
# (scripts/image-check.sh compares them).
entrypoint=/usr/local/bin/kube-ipvs
cmd=agent
runtime_pkgs=(iptables ipset conntrack)

log() { echo "image: $*" >&2; }
die() { echo "image: error: $*" >&2; exit 1; }

# --- host packages --------------------------------------------------------
# Package -> a file it provides, so a present tool skips dpkg/apt entirely.
install_missing() { # package:file ...
  local missing=() entry
  for entry in "$@"; do
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

rootfs_tools=(
  "mmdebstrap:/usr/bin/mmdebstrap"
  "debian-archive-keyring:/usr/share/keyrings/debian-archive-keyring.gpg"
)
oci_tools=(
  "umoci:/usr/bin/umoci"
)

# --- root file system -----------------------------------------------------------
# Extracts the runtime packages (and the libraries they depend on) into dir.
# Chrootless extraction runs nothing from the target and mounts nothing, so it
# also works in an unprivileged container build. mmdebstrap refuses root's
# chrootless mode outside a chroot because maintainer scripts could then touch
# the host (check/chrootless); extraction runs none.
build_rootfs() { # $1 dir (absent or empty)
  local dir=$1
  mmdebstrap --mode=chrootless --variant=extract --skip=check/chrootless --skip=cleanup/apt/cache \
    --include="$(IFS=,; echo "${runtime_pkgs[*]}")" "$suite" "$dir" >&2
  write_dpkg_status "$dir"
  trim_rootfs "$dir"
  finish_rootfs "$dir"
}

# Records what was extracted the way dpkg would, so image scanners can match
# the image's packages against security advisories. The image has no dpkg.
write_dpkg_status() { # $1 root
  local root=$1 deb status=$1/var/lib/dpkg/status
  mkdir -p "$root/var/lib/dpkg"
  : >"$status"
  for deb in "$root"/var/cache/apt/archives/*.deb; do
    dpkg-deb -f "$deb" | awk 'NR == 1 { print; print "Status: install ok installed"; next } { print }' >>"$status"
    echo >>"$status"
  done
  [ -s "$status" ] || die "mmdebstrap extracted no packages"
  log "packages: $(awk '/^Package:/ {p=$2} /^Version:/ {printf "%s=%s ", p, $2}' "$status")"
}

# Drops what the agent and a person debugging it never read: documentation
# (the copyright files stay), translations, iconv modules, apt's and dpkg's
# configuration, device nodes (the runtime makes /dev) and the build host's
# resolv.conf and hostname.
trim_rootfs() { # $1 root
  local root=$1
  find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{man,info,locale,lintian,bash-completion,bug} \
    "$root"/usr/lib/x86_64-linux-gnu/gconv \
    "$root"/etc/{apt,dpkg,resolv.conf,hostname,fstab} \
    "$root"/var/cache "$root"/var/lib/apt "$root"/var/log
  rm -rf "${root:?}"/dev
  mkdir -m 755 "$root/dev"
}

# Does what the packages' maintainer scripts and base-files would have done.
finish_rootfs() { # $1 root
  local root=$1 d t
  # Merged /usr: the ELF interpreter is /lib64/ld-linux-x86-64.so.2.
  for d in bin sbin lib lib64; do
    mkdir -p "$root/usr/$d"
    ln -sfn "usr/$d" "$root/$d"
  done
  # iptables' postinst points the plain names at the nft flavour (Debian's
  # default); the agent itself always runs iptables-nft-* or iptables-legacy-*.
  for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    [ -e "$root/usr/sbin/${t/tables/tables-nft}" ] || die "no ${t/tables/tables-nft} in the root file system"
    ln -sfn "${t/tables/tables-nft}" "$root/usr/sbin/$t"
  done
  # iptables-legacy takes its lock in /run; the runtime gives /proc, /sys, /dev.
  mkdir -p "$root"/{run,proc,sys,tmp,root,usr/local/bin}
  chmod 1777 "$root/tmp"
  chmod 700 "$root/root"
  ln -sfn ../run "$root/var/run"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
}

# A reproducible uncompressed tar of dir's contents, names without "./":
# an image layer, or the OCI layout archive.
layer_tar() { # $1 dir, $2 output
  (cd "$1" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort) |
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --owner=0 --group=0 --numeric-owner \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      -C "$1" -cf "$2" -T -
}

# The recipe is this script: editing it rebuilds the cached root file system.
recipe_stamp() {
  { cat "$here/image.sh"; echo "$suite"; } | sha256sum | cut -c1-16
}

# Prints the path of the cached root file system layer, building it when it is
# missing, stale or older than a day. Offline, a stale one is better than none.
cached_base() {
  local stamp base tmp
  stamp=$(recipe_stamp)
  base="$cache_root/base-$suite-$stamp.tar"
  if [ -f "$base" ] && [ "${KUBE_IPVS_IMAGE_REFRESH:-0}" != 1 ] && [ -n "$(find "$base" -mmin -1440)" ]; then
    log "cached root file system: $base"
    echo "$base"
    return 0
  fi
  tmp=$(mktemp -d "$cache_root/rootfs.XXXXXX")
  chmod 755 "$tmp" # apt's _apt user downloads into it
  log "extracting Debian $suite packages: ${runtime_pkgs[*]}"
  # A process of its own, so that set -e holds inside (it would not in a
  # function called as a condition).
  if ! "$here/image.sh" rootfs "$tmp/rootfs" || ! layer_tar "$tmp/rootfs" "$tmp/base.tar"; then
    rm -rf "$tmp"
    [ -f "$base" ] || die "could not build the root file system"
    log "could not refresh the root file system; using the cached one"
    echo "$base"
    return 0
  fi
  rm -f "$cache_root"/base-"$suite"-*.tar
  mv "$tmp/base.tar" "$base"
  rm -rf "$tmp"
  echo "$base"
}

# --- OCI image ------------------------------------------------------------------
agent_layer() { # $1 output tar
  local tmp
  tmp=$(mktemp -d)
  install -D -m 755 "$binary" "$tmp/root${entrypoint}"
  layer_tar "$tmp/root" "$1"
  rm -rf "$tmp"
}

build() {
  [ -x "$binary" ] || die "no $binary: run 'make static' first"
  file_is_static "$binary" || die "$binary is not static: build it with 'make static'"
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.lock"
  flock 9
  install_missing "${oci_tools[@]}"
  local base version work layout created
  base=$(cached_base)
  version=$("$binary" version | awk '{print $2}')
  created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  layout=$work/layout
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci raw add-layer --image "$layout:$tag" --history.created "$created" \
    --history.created_by "mmdebstrap --variant=extract $suite: ${runtime_pkgs[*]}" "$base"
  agent_layer "$work/agent.tar"
  umoci raw add-layer --image "$layout:$tag" --history.created "$created" \
    --history.created_by "kube-ipvs $version (static)" "$work/agent.tar"
  umoci config --image "$layout:$tag" --no-history --created "$created" \
    --config.entrypoint "$entrypoint" --config.cmd "$cmd" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.label "org.opencontainers.image.title=kube-ipvs" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
  umoci gc --layout "$layout"
  chmod -R a+rX "$layout" # umoci writes blobs for root alone; the archive is for anyone
  mkdir -p "$(dirname "$archive")"
  layer_tar "$layout" "$archive.tmp"
  mv "$archive.tmp" "$archive"
  log "built $archive (tag $tag, kube-ipvs $version): $(du -h "$archive" | cut -f1) archive;" \
    "unpacked $(du -h "$base" | cut -f1) root file system + $(du -h "$binary" | cut -f1) agent"
}

file_is_static() { # $1 binary: ldd finds nothing to load (and exits 1)
  local out
  out=$(LC_ALL=C ldd "$1" 2>&1) || true
  grep -Eq 'not a dynamic executable|statically linked' <<<"$out"
}

# Unpacks the archive with umoci into an OCI runtime bundle: rootfs/ and
# config.json, whose process.args are the image's entrypoint and command.
unpack() { # $1 bundle dir (replaced)
  local dir=$1 layout
  [ -f "$archive" ] || die "no $archive: run 'make image' first"
  install_missing "${oci_tools[@]}"
  layout=$(mktemp -d)
  tar -xf "$archive" -C "$layout"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  umoci unpack --image "$layout:$tag" "$dir" >&2
  rm -rf "$layout"
  log "unpacked $tag into $dir: rootfs $(du -sh "$dir/rootfs" | cut -f1)"
}

main() {
  [ "$(id -u)" = 0 ] || die "must run as root (root-owned files, apt-get)"
  # Reproducible timestamps: the commit's, like everything else in the image.
  : "${SOURCE_DATE_EPOCH:=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}"
  export SOURCE_DATE_EPOCH
  case "${1:-build}" in
  build) build ;;
  rootfs)
    [ $# -eq 2 ] || die "usage: $0 rootfs DIR"
    install_missing "${rootfs_tools[@]}"
    build_rootfs "$2"
    ;;
  unpack)
    [ $# -eq 2 ] || die "usage: $0 unpack DIR"
    unpack "$2"
    ;;
  *) die "usage: $0 [build | rootfs DIR | unpack DIR]" ;;
  esac
}

main "$@"
