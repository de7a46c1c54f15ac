#!/usr/bin/env bash
# image.sh: build the DaemonSet's OCI image, one index of linux/amd64 and
# linux/arm64, with no container daemon, no image registry and no emulation.
#
# The root file system is extracted by mmdebstrap from Debian's own packages:
# iptables (xtables-nft-multi and xtables-legacy-multi: the agent's shim runs
# the flavour the node uses), ipset and conntrack (for people debugging a node
# from the pod; the agent itself talks netlink for sets and flows), and their
# libraries. No shell, no apt, no dpkg: nothing runs maintainer scripts in it,
# so the few things they would do are done here (merged-/usr links, the
# iptables alternatives, a dpkg status file for image scanners). Extraction
# runs nothing from the packages, so another architecture's root file system
# is extracted the same way, from that architecture's packages. The static
# agent, cross-compiled, goes on top as a second layer; umoci assembles one
# image per platform; an image index names both with their platforms, under
# the tag, and the OCI image layout is archived as one tar.
#
#   scripts/image.sh [build]      bin/kube-ipvs-image.oci.tar from bin/kube-ipvs-OS-ARCH (`make static-platforms`)
#   scripts/image.sh rootfs DIR [ARCH]   only the Debian root file system, into DIR (the Dockerfile uses this)
#   scripts/image.sh unpack DIR [OS/ARCH]   unpack one platform's image into an OCI runtime bundle:
#                                 DIR/rootfs, DIR/config.json (default linux/amd64)
#
# KUBE_IPVS_PLATFORMS: the platforms (default "linux/amd64 linux/arm64");
# KUBE_IPVS_IMAGE_TAG: the tag the index is named by in the layout (dev);
# KUBE_IPVS_IMAGE_NAME: the image name the archive carries for importers
# (containerd's io.containerd.image.name), default kube-ipvs:TAG.
#
# Each architecture's root file system is cached under
# ${KUBE_IPVS_CACHE:-~/.cache/kube-ipvs}/image and rebuilt from Debian's archive when this script changes or after a day
# (KUBE_IPVS_IMAGE_REFRESH=1: now). Must run as root: the files are root's and
# missing tools are installed with apt-get.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cache_root="${KUBE_IPVS_CACHE:-$HOME/.cache/kube-ipvs}/image"
suite=${KUBE_IPVS_IMAGE_SUITE:-trixie}
tag=${KUBE_IPVS_IMAGE_TAG:-dev}
name=${KUBE_IPVS_IMAGE_NAME:-kube-ipvs:$tag}
archive=${KUBE_IPVS_IMAGE:-$repo/bin/kube-ipvs-image.oci.tar}
read -r -a platforms <<<"${KUBE_IPVS_PLATFORMS:-linux/amd64 linux/arm64}"

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
build_rootfs() { # $1 dir (absent or empty), $2 Debian architecture
  local dir=$1 arch=$2
  mmdebstrap --mode=chrootless --variant=extract --skip=check/chrootless --skip=cleanup/apt/cache \
    --architectures="$arch" --include="$(IFS=,; echo "${runtime_pkgs[*]}")" "$suite" "$dir" >&2
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
    "$root"/usr/lib/*-linux-gnu/gconv \
    "$root"/etc/{apt,dpkg,resolv.conf,hostname,fstab} \
    "$root"/var/cache "$root"/var/lib/apt "$root"/var/log
  rm -rf "${root:?}"/dev
  mkdir -m 755 "$root/dev"
}

# Does what the packages' maintainer scripts and base-files would have done.
finish_rootfs() { # $1 root
  local root=$1 d t
  # Merged /usr: the ELF interpreter is /lib64/ld-linux-x86-64.so.2 on
  # amd64, /lib/ld-linux-aarch64.so.1 on arm64.
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

# Prints the path of an architecture's cached root file system layer, building
# it when it is missing, stale or older than a day. Offline, a stale one is
# better than none.
cached_base() { # $1 Debian architecture
  local arch=$1 stamp base tmp
  stamp=$(recipe_stamp)
  base="$cache_root/base-$suite-$arch-$stamp.tar"
  if [ -f "$base" ] && [ "${KUBE_IPVS_IMAGE_REFRESH:-0}" != 1 ] && [ -n "$(find "$base" -mmin -1440)" ]; then
    log "cached $arch root file system: $base"
    echo "$base"
    return 0
  fi
  tmp=$(mktemp -d "$cache_root/rootfs.XXXXXX")
  chmod 755 "$tmp" # apt's _apt user downloads into it
  log "extracting Debian $suite $arch packages: ${runtime_pkgs[*]}"
  # A process of its own, so that set -e holds inside (it would not in a
  # function called as a condition).
  if ! "$here/image.sh" rootfs "$tmp/rootfs" "$arch" || ! layer_tar "$tmp/rootfs" "$tmp/base.tar"; then
    rm -rf "$tmp"
    [ -f "$base" ] || die "could not build the $arch root file system"
    log "could not refresh the $arch root file system; using the cached one"
    echo "$base"
    return 0
  fi
  rm -f "$cache_root"/base-"$suite"-"$arch"-*.tar "$cache_root"/base-"$suite"-????????????????.tar
  mv "$tmp/base.tar" "$base"
  rm -rf "$tmp"
  echo "$base"
}

# --- OCI image ------------------------------------------------------------------
# Debian's name for a Go architecture: the same for the two the image has.
debian_arch() { # $1 GOARCH
  case $1 in
  amd64 | arm64) echo "$1" ;;
  *) die "no Debian architecture known for GOARCH $1" ;;
  esac
}

binary_of() { # $1 os/arch
  echo "$repo/bin/kube-ipvs-${1%/*}-${1#*/}"
}

# The version the agents were linked with (-X main.version=): the Makefile
# says, or else this machine's platform's agent prints it. (Build
# information leaves -ldflags out under -trimpath, and the other
# architecture's binary does not run here.)
agent_version() {
  [ -z "${KUBE_IPVS_VERSION:-}" ] || { echo "$KUBE_IPVS_VERSION"; return 0; }
  local own
  own=$(binary_of "linux/$(go env GOARCH)")
  [ -x "$own" ] || die "set KUBE_IPVS_VERSION, or build $own"
  "$own" version | awk '{print $2}'
}

# Checks that the binary is static and built for the platform.
check_binary() { # $1 binary, $2 os/arch
  local info
  [ -x "$1" ] || die "no $1: run 'make static-platforms' first"
  info=$(go version -m "$1") || die "$1: no Go build information"
  grep -q $'\tCGO_ENABLED=0$' <<<"$info" || die "$1 is not static (CGO_ENABLED=0): build it with 'make static-platforms'"
  grep -q $'\tGOOS='"${2%/*}"'$' <<<"$info" && grep -q $'\tGOARCH='"${2#*/}"'$' <<<"$info" ||
    die "$1 is not built for $2"
}

agent_layer() { # $1 binary, $2 output tar
  local tmp
  tmp=$(mktemp -d)
  install -D -m 755 "$1" "$tmp/root${entrypoint}"
  layer_tar "$tmp/root" "$2"
  rm -rf "$tmp"
}

# Adds one platform's image to the layout under the reference $tag-OS-ARCH.
add_platform() { # $1 layout, $2 os/arch, $3 version, $4 created, $5 work dir
  local layout=$1 platform=$2 version=$3 created=$4 work=$5 os=${2%/*} arch=${2#*/} ref base
  ref="$tag-$os-$arch"
  base=$(cached_base "$(debian_arch "$arch")")
  umoci new --image "$layout:$ref"
  umoci raw add-layer --image "$layout:$ref" --history.created "$created" \
    --history.created_by "mmdebstrap --variant=extract --architectures=$(debian_arch "$arch") $suite: ${runtime_pkgs[*]}" "$base"
  agent_layer "$(binary_of "$platform")" "$work/agent-$os-$arch.tar"
  umoci raw add-layer --image "$layout:$ref" --history.created "$created" \
    --history.created_by "kube-ipvs $version $platform (static)" "$work/agent-$os-$arch.tar"
  umoci config --image "$layout:$ref" --no-history --created "$created" \
    --os "$os" --architecture "$arch" \
    --config.entrypoint "$entrypoint" --config.cmd "$cmd" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.label "org.opencontainers.image.title=kube-ipvs" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
  log "$platform: $(du -h "$base" | cut -f1) root file system + $(du -h "$(binary_of "$platform")" | cut -f1) agent"
}

# Replaces the layout's per-platform references with one image index that
# lists each platform's manifest with its platform, named by $tag (and by
# $name for containerd's importer). The per-platform manifests then hang off
# the index only, as a registry would hold them.
write_index() { # $1 layout
  local layout=$1 index digest
  index=$(jq -c --arg tag "$tag" '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [.manifests[] | (.annotations["org.opencontainers.image.ref.name"] | ltrimstr($tag + "-") | split("-")) as $p
        | {mediaType, digest, size, platform: {os: $p[0], architecture: $p[1]}}]}' "$layout/index.json")
  digest=$(printf '%s' "$index" | sha256sum | cut -d' ' -f1)
  printf '%s' "$index" >"$layout/blobs/sha256/$digest"
  jq -c -n --arg digest "sha256:$digest" --argjson size "$(printf '%s' "$index" | wc -c)" --arg tag "$tag" --arg name "$name" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{mediaType: "application/vnd.oci.image.index.v1+json", digest: $digest, size: $size,
        annotations: {"org.opencontainers.image.ref.name": $tag, "io.containerd.image.name": $name}}]}' \
    >"$layout/index.json"
}

build() {
  local platform version work layout created
  for platform in "${platforms[@]}"; do
    check_binary "$(binary_of "$platform")" "$platform"
  done
  version=$(agent_version)
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.lock"
  flock 9
  install_missing "${oci_tools[@]}" "jq:/usr/bin/jq"
  created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  work=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  layout=$work/layout
  umoci init --layout "$layout"
  for platform in "${platforms[@]}"; do
    add_platform "$layout" "$platform" "$version" "$created" "$work"
  done
  umoci gc --layout "$layout"
  write_index "$layout"
  chmod -R a+rX "$layout" # umoci writes blobs for root alone; the archive is for anyone
  mkdir -p "$(dirname "$archive")"
  layer_tar "$layout" "$archive.tmp"
  mv "$archive.tmp" "$archive"
  log "built $archive ($name, kube-ipvs $version, ${platforms[*]}): $(du -h "$archive" | cut -f1) archive"
}

# Unpacks one platform's image from the archive with umoci into an OCI
# runtime bundle: rootfs/ and config.json, whose process.args are the
# image's entrypoint and command. umoci unpacks a manifest, not an index: a
# scratch copy of the layout names the platform's manifest by the tag.
unpack() { # $1 bundle dir (replaced), $2 os/arch
  local dir=$1 platform=$2 layout index manifest
  [ -f "$archive" ] || die "no $archive: run 'make image' first"
  install_missing "${oci_tools[@]}" "jq:/usr/bin/jq"
  layout=$(mktemp -d)
  tar -xf "$archive" -C "$layout"
  index=$(jq -r --arg tag "$tag" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag) | .digest' \
    "$layout/index.json")
  [ -n "$index" ] || die "no index tagged $tag in $archive"
  manifest=$(jq -c --arg os "${platform%/*}" --arg arch "${platform#*/}" \
    '.manifests[] | select(.platform.os == $os and .platform.architecture == $arch)' "$layout/blobs/sha256/${index#sha256:}")
  [ -n "$manifest" ] || die "no $platform image in $archive"
  jq -c -n --argjson m "$manifest" --arg tag "$tag" \
    '{schemaVersion: 2, manifests: [$m | del(.platform) | .annotations = {"org.opencontainers.image.ref.name": $tag}]}' \
    >"$layout/index.json"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  umoci unpack --image "$layout:$tag" "$dir" >&2
  rm -rf "$layout"
  log "unpacked $tag $platform into $dir: rootfs $(du -sh "$dir/rootfs" | cut -f1)"
}

main() {
  [ "$(id -u)" = 0 ] || die "must run as root (root-owned files, apt-get)"
  # Reproducible timestamps: the commit's, like everything else in the image.
  : "${SOURCE_DATE_EPOCH:=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)}"
  export SOURCE_DATE_EPOCH
  case "${1:-build}" in
  build) build ;;
  rootfs)
    [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 rootfs DIR [ARCH]"
    install_missing "${rootfs_tools[@]}"
    build_rootfs "$2" "${3:-$(dpkg --print-architecture)}"
    ;;
  unpack)
    [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: $0 unpack DIR [OS/ARCH]"
    unpack "$2" "${3:-linux/amd64}"
    ;;
  *) die "usage: $0 [build | rootfs DIR [ARCH] | unpack DIR [OS/ARCH]]" ;;
  esac
}

main "$@"
