#!/usr/bin/env bash
# image-check.sh: prove the built image (bin/kube-ipvs-image.oci.tar, `make
# image`), not just its archive. The archive's index must name a linux/amd64
# and a linux/arm64 image. It unpacks the amd64 image with umoci into an OCI
# runtime bundle, takes the command from the bundle's config (the image's
# ENTRYPOINT + CMD, which must be the Dockerfile's), and runs everything from
# the image's own root file system (chroot) in a fresh network, mount and PID
# namespace:
#
#   - the entrypoint: `version` names the image's version label, and `agent`
#     (with examples/ as its source) starts and reaches the kernel: it programs
#     IPVS where the kernel has it, and elsewhere must fail only because IPVS
#     is missing;
#   - the image's iptables (nft and legacy), ipset and conntrack;
#   - the agent's netfilter shim (its Go tests, built static and run in the
#     image's root file system) writing and reading its rules and sets with
#     the image's iptables-nft-restore/-save and iptables-legacy-restore/-save
#     and detecting the backend. The shim needs no IPVS.
#
# The arm64 image, unpacked the same way, runs from its own root file system
# under qemu-user (qemu-aarch64-static, from Debian's qemu-user-static,
# installed if missing; no binfmt_misc needed): its agent's `version` names
# the version label and linux/arm64, its agent starts against examples/ as far
# as opening IPVS (qemu-user passes only routing netlink, so it stops there),
# and its iptables (both flavours), ipset and conntrack load their arm64
# libraries.
#
# With --vm it also boots the IPVS VM (scripts/vm/run.sh) and runs the agent
# there from the image's root file system, privileged with the host's
# network as the DaemonSet runs it: the entrypoint and command against
# examples/ must
# program the table scripts/agent-vm.sh expects, write the shim's rules with
# the image's iptables (nft on a bare node), plan nothing on a second run and
# clean up after itself.
#
# Leaves the bundles in bin/kube-ipvs-image/ and bin/kube-ipvs-image-arm64/
# (rootfs/, config.json). Root only.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
bundle=${KUBE_IPVS_IMAGE_BUNDLE:-$repo/bin/kube-ipvs-image}
archive=${KUBE_IPVS_IMAGE:-$repo/bin/kube-ipvs-image.oci.tar}
tag=${KUBE_IPVS_IMAGE_TAG:-dev}
rootfs=$bundle/rootfs
bundle_arm64=${KUBE_IPVS_IMAGE_BUNDLE_ARM64:-$repo/bin/kube-ipvs-image-arm64}

log() { echo "image-check: $*" >&2; }
die() { echo "image-check: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (namespaces, chroot)"
[ -f "$archive" ] || die "no $archive: run 'make image' first"
command -v jq >/dev/null || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq >&2; }
}

# The image index tagged $tag, read from the archive.
image_index() {
  local index
  index=$(tar -xOf "$archive" index.json |
    jq -r --arg tag "$tag" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag) |
      select(.mediaType == "application/vnd.oci.image.index.v1+json") | .digest')
  [ -n "$index" ] || die "no image index tagged $tag in $archive"
  tar -xOf "$archive" "blobs/sha256/${index#sha256:}"
}

# A platform's image config, read from the archive: index -> manifest ->
# config, which must name the platform the index lists it under.
image_config() { # $1 os/arch
  local manifest config
  manifest=$(image_index | jq -r --arg os "${1%/*}" --arg arch "${1#*/}" \
    '.manifests[] | select(.platform.os == $os and .platform.architecture == $arch) | .digest')
  [ "$(wc -w <<<"$manifest")" = 1 ] || die "the index tagged $tag lists $(wc -w <<<"$manifest") images for $1"
  config=$(tar -xOf "$archive" "blobs/sha256/${manifest#sha256:}" | jq -r .config.digest)
  config=$(tar -xOf "$archive" "blobs/sha256/${config#sha256:}")
  [ "$(jq -r '.os + "/" + .architecture' <<<"$config")" = "$1" ] ||
    die "the $1 image's config says $(jq -r '.os + "/" + .architecture' <<<"$config")"
  echo "$config"
}

# A JSON array instruction (ENTRYPOINT, CMD) of the Dockerfile's last stage.
dockerfile_array() { # $1 instruction
  grep "^$1 " "$repo/Dockerfile" | tail -n1 | sed "s/^$1 //" | jq -c .
}

# Runs a command from the image's root file system in the network namespace
# $netns (made in main): its own mounts (proc, sysfs, a /dev with the usual
# devices), its own PIDs, and only the image's environment ($image_env, from
# the bundle) plus $extra_env.
in_image() {
  # shellcheck disable=SC2016 # expanded by the inner bash
  nsenter --net="$netns" unshare --mount --pid --fork --kill-child -- bash -c '
    set -e
    r=$1; shift
    mount --make-rprivate /
    mount -t proc proc "$r/proc"
    mount -t sysfs sysfs "$r/sys"
    mount -t tmpfs -o mode=755 tmpfs "$r/dev"
    for d in null zero full random urandom tty; do
      touch "$r/dev/$d"
      mount --bind "/dev/$d" "$r/dev/$d"
    done
    # shellcheck disable=SC2086 # one NAME=VALUE a word
    exec env -i $image_env $extra_env "$chroot" "$r" "$@"' bash "$rootfs" "$@"
}

# Makes a new network namespace, kept in a file under $nsdir, for in_image.
fresh_netns() {
  netns=$(mktemp "$nsdir/net.XXXXXX")
  unshare --net="$netns" true
  export netns
}

expect() { # $1 what, $2 pattern (grep -E), $3 output
  grep -Eq -- "$2" <<<"$3" || die "$1: expected /$2/ in:
$3"
  log "ok: $1"
}

# Runs a command in the image (in_image), which must succeed and print
# something matching pattern.
check() { # $1 what, $2 pattern, command...
  local what=$1 pattern=$2 out
  shift 2
  out=$(in_image "$@" 2>&1) || die "$what: '$*' failed in the image: $out"
  expect "$what" "$pattern" "$out"
}

main() {
  local vm=0 config entry cmd args
  case "${1:-}" in
  --vm) vm=1 ;;
  --arm64)
    arm64_only
    return 0
    ;;
  "") ;;
  *) die "usage: $0 [--vm | --arm64]" ;;
  esac
  "$here/image.sh" unpack "$bundle" linux/amd64
  config=$(image_config linux/amd64)
  entry=$(jq -c .config.Entrypoint <<<"$config")
  cmd=$(jq -c .config.Cmd <<<"$config")
  [ "$entry" = "$(dockerfile_array ENTRYPOINT)" ] || die "image ENTRYPOINT $entry, Dockerfile $(dockerfile_array ENTRYPOINT)"
  [ "$cmd" = "$(dockerfile_array CMD)" ] || die "image CMD $cmd, Dockerfile $(dockerfile_array CMD)"
  log "ok: ENTRYPOINT $entry CMD $cmd, as the Dockerfile"
  # What a runtime runs: the bundle's process.args (ENTRYPOINT + CMD).
  mapfile -t args < <(jq -r '.process.args[]' "$bundle/config.json")
  [ "$(jq -c '.process.args' "$bundle/config.json")" = "$(jq -c -n --argjson e "$entry" --argjson c "$cmd" '$e + $c')" ] ||
    die "bundle process.args $(jq -c '.process.args' "$bundle/config.json") are not ENTRYPOINT + CMD"
  image_env=$(jq -r '.process.env | join(" ")' "$bundle/config.json")
  chroot=$(command -v chroot)
  extra_env=
  export image_env chroot extra_env rootfs

  for f in bin/sh usr/bin/apt-get usr/bin/dpkg; do
    [ ! -e "$rootfs/$f" ] || die "the image has /$f: it should carry no shell or package manager"
  done

  nsdir=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "umount '$nsdir'/* 2>/dev/null; rm -rf '$nsdir'" EXIT
  fresh_netns

  local version
  version=$(jq -r '.config.Labels["org.opencontainers.image.version"]' <<<"$config")
  check "entrypoint: version" "^kube-ipvs $version linux/amd64\$" "${args[0]}" version
  check "iptables is the nft flavour" '^iptables v[0-9.]+ \(nf_tables\)$' iptables --version
  check "iptables-legacy" '^iptables v[0-9.]+ \(legacy\)$' iptables-legacy --version
  local flavour rule='-A KUBE-IPVS-IMAGE-CHECK -p tcp -m comment --comment image-check -j RETURN'
  for flavour in iptables-nft iptables-legacy ip6tables-nft ip6tables-legacy; do
    printf '*filter\n:KUBE-IPVS-IMAGE-CHECK - [0:0]\n%s\nCOMMIT\n' "$rule" |
      in_image "$flavour-restore" --noflush --wait || die "$flavour-restore failed in the image"
    check "$flavour-restore, then -save (an extension included)" "^${rule}\$" "$flavour-save" -t filter
  done
  check "ipset create" '^$' ipset create kube-ipvs-image-check hash:ip,port
  check "ipset add" '^$' ipset add kube-ipvs-image-check 10.96.0.10,udp:53
  check "ipset list" '^10\.96\.0\.10,udp:53$' ipset list kube-ipvs-image-check
  check "conntrack -L" 'flow entries have been shown' conntrack -L

  check_agent "${args[@]}"
  check_shim
  check_arm64 "$version"
  [ $vm = 0 ] || check_vm "${args[@]}"
  log "PASS: $(du -h "$archive" | cut -f1) archive, $(du -sh "$rootfs" | cut -f1) unpacked root file system ($rootfs)"
}

# The entrypoint with a manifest folder as the source, once. (The
# DaemonSet's own command line, with kubeadm's ConfigMap and a real API
# server, runs in make cluster-vm.)
check_agent() { # entrypoint + cmd
  local out rc=0
  mkdir -p "$rootfs/tmp/examples"
  cp "$repo"/examples/*.yaml "$rootfs/tmp/examples/"
  out=$(in_image "$@" --logging-format=json --manifests /tmp/examples --once 2>&1) || rc=$?
  if [ $rc -eq 0 ]; then
    log "ok: agent --once programmed this kernel's IPVS from the image"
  else
    expect "agent starts and fails only for the missing IPVS (exit $rc)" 'IPVS is not available in this kernel' "$out"
  fi
  rm -rf "$rootfs/tmp/examples"
}

# The shim's own tests, run from the image's root file system: every
# iptables and ipset they and the shim exec is the image's. A skipped test
# (a tool not found) fails the check.
check_shim() {
  log "building the netfilter shim's tests (static)"
  (cd "$repo" && CGO_ENABLED=0 go test -c -o "$rootfs/tmp/linux.test" ./internal/dataplane/linux)
  local test out rc
  # Each test in a fresh namespace, as the tests do on the host: sets are
  # shared by both iptables flavours. KUBE_IPVS_NETNS=1 tells the tests
  # they are in a namespace of their own already.
  for test in TestShimNFT TestShimLegacy TestShimDetectsBackend; do
    fresh_netns
    rc=0
    out=$(extra_env=KUBE_IPVS_NETNS=1 in_image /tmp/linux.test -test.run "^$test\$" -test.v -test.count=1 2>&1) || rc=$?
    grep -E '^ *--- ' <<<"$out" >&2 || true
    [ $rc -eq 0 ] || die "$test failed in the image (exit $rc):
$out"
    ! grep -q -- '--- SKIP' <<<"$out" || die "$test skipped in the image: $(grep -- '--- SKIP' <<<"$out")"
    expect "$test: the shim with the image's tools" "^--- PASS: $test " "$out"
  done
  rm -f "$rootfs/tmp/linux.test"
}

# --arm64: only the arm64 image under qemu-user (make image-arm64, part of
# make test: seconds once qemu-user-static is installed).
arm64_only() {
  chroot=$(command -v chroot)
  extra_env=
  export chroot extra_env
  nsdir=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "umount '$nsdir'/* 2>/dev/null; rm -rf '$nsdir'" EXIT
  check_arm64 "$(image_config linux/amd64 | jq -r '.config.Labels["org.opencontainers.image.version"]')"
  log "PASS: the arm64 image under qemu-user"
}

# The arm64 image from its own root file system, each program started by
# qemu-user (static, so it runs inside the chroot and loads the image's arm64
# dynamic linker and libraries for the dynamic ones).
check_arm64() { # $1 version label of the amd64 image
  local config qemu out rc=0
  config=$(image_config linux/arm64)
  [ "$(jq -c .config.Entrypoint <<<"$config")" = "$(dockerfile_array ENTRYPOINT)" ] &&
    [ "$(jq -c .config.Cmd <<<"$config")" = "$(dockerfile_array CMD)" ] ||
    die "the arm64 image's ENTRYPOINT and CMD are not the Dockerfile's"
  [ "$(jq -r '.config.Labels["org.opencontainers.image.version"]' <<<"$config")" = "$1" ] ||
    die "the arm64 image's version label is not $1"
  log "ok: the index lists linux/amd64 and linux/arm64, each config naming its platform"
  qemu=$(command -v qemu-aarch64-static) || {
    log "installing qemu-user-static"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-user-static >&2 ||
      { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-user-static >&2; }
    qemu=$(command -v qemu-aarch64-static) || die "no qemu-aarch64-static after installing qemu-user-static"
  }
  "$here/image.sh" unpack "$bundle_arm64" linux/arm64
  local args
  mapfile -t args < <(jq -r '.process.args[]' "$bundle_arm64/config.json")
  image_env=$(jq -r '.process.env | join(" ")' "$bundle_arm64/config.json")
  export image_env
  install -m 755 "$qemu" "$bundle_arm64/rootfs/tmp/qemu-aarch64-static"
  local rootfs=$bundle_arm64/rootfs f
  for f in bin/sh usr/bin/apt-get usr/bin/dpkg; do
    [ ! -e "$rootfs/$f" ] || die "the arm64 image has /$f: it should carry no shell or package manager"
  done
  fresh_netns
  check "arm64: entrypoint: version under qemu-user" "^kube-ipvs $1 linux/arm64\$" /tmp/qemu-aarch64-static "${args[0]}" version
  # qemu-user passes no netfilter netlink, so the tools that open it at once
  # (iptables-nft, ipset, conntrack) are proven by their dynamic linker
  # finding every library in the image.
  check "arm64: iptables-restore is the nft flavour" '^iptables-restore v[0-9.]+ \(nf_tables\)$' \
    /tmp/qemu-aarch64-static /usr/sbin/iptables-restore --version
  check "arm64: iptables-legacy" '^iptables v[0-9.]+ \(legacy\)$' /tmp/qemu-aarch64-static /usr/sbin/iptables-legacy --version
  local tool
  for tool in xtables-nft-multi xtables-legacy-multi ipset conntrack; do
    out=$(in_image /tmp/qemu-aarch64-static /lib/ld-linux-aarch64.so.1 --list "/usr/sbin/$tool" 2>&1) ||
      die "arm64: the dynamic linker cannot load /usr/sbin/$tool: $out"
    ! grep -q 'not found' <<<"$out" || die "arm64: /usr/sbin/$tool misses libraries: $out"
    expect "arm64: $tool finds its libraries" '/lib/aarch64-linux-gnu/libc\.so\.6' "$out"
  done
  mkdir -p "$rootfs/tmp/examples"
  cp "$repo"/examples/*.yaml "$rootfs/tmp/examples/"
  out=$(in_image /tmp/qemu-aarch64-static "${args[@]}" --logging-format=json --manifests /tmp/examples --once 2>&1) || rc=$?
  if [ $rc -eq 0 ]; then
    log "ok: arm64: agent --once under qemu-user programmed this kernel's IPVS from the image"
  else
    expect "arm64: agent starts under qemu-user and fails only for the missing IPVS (exit $rc)" 'IPVS is not available in this kernel' "$out"
  fi
  rm -rf "$rootfs/tmp/examples" "$rootfs/tmp/qemu-aarch64-static"
}

# The agent from the image's root file system on a real IPVS kernel.
check_vm() { # entrypoint + cmd
  local work word agent=""
  work=$(mktemp -d)
  # Busybox tar in the guest reads plain GNU tar.
  tar --format=gnu -C "$rootfs" -cf "$work/image.tar" .
  for word in "$@" --logging-format=json --log-level=info --manifests /tmp/examples --hostname-override node-a; do
    agent+=" '$word'"
  done
  cat >"$work/guest.sh" <<GUEST
set -u
fail() { echo "image-check: FAIL (vm): \$*"; exit 1; }
# The image's entrypoint and command, examples/ as the source.
agent() { chroot /image$agent "\$@"; }
GUEST
  cat >>"$work/guest.sh" <<'GUEST'
mkdir /image && tar -xf /image.tar -C /image || fail "unpack the image"
# What a runtime gives a privileged host-network pod.
mount -t proc proc /image/proc && mount -t sysfs sysfs /image/sys && mount -o bind /dev /image/dev ||
  fail "mount proc, sys, dev"
mkdir -p /image/tmp/examples && cp /examples/*.yaml /image/tmp/examples/
agent --once >/tmp/agent.log 2>&1 || { rc=$?; cat /tmp/agent.log; fail "agent --once from the image exited $rc"; }
grep -q '"backend":"nft"' /tmp/agent.log || { cat /tmp/agent.log; fail "the agent did not choose nft on a bare node"; }
# The guest's own ipvsadm reads what the image's agent programmed. The kernel
# lists in a per-boot hash order: compare sorted lines.
ipvsadm -Ln >/tmp/got.ipvsadm
sort /tmp/got.ipvsadm >/tmp/got.sorted
sort /expected.ipvsadm >/tmp/want.sorted
diff -u /tmp/want.sorted /tmp/got.sorted || fail "ipvsadm -Ln differs from scripts/testdata/agent-once.ipvsadm"
echo "image-check: ok (vm): the image's agent programmed the expected IPVS table"
chroot /image iptables-save -t nat >/tmp/nat.rules || fail "the image's iptables-save"
grep -q -- '-A POSTROUTING -j KUBE-IPVS-POSTROUTING' /tmp/nat.rules || { cat /tmp/nat.rules; fail "no shim jump in the image's iptables-save"; }
echo "image-check: ok (vm): the shim's rules, read back with the image's iptables-save"
plan=$(agent --dry-run 2>/dev/null) || fail "agent --dry-run from the image exited $?"
[ -z "$plan" ] || fail "a second agent planned operations: $plan"
echo "image-check: ok (vm): a second agent from the image plans nothing"
chroot /image /usr/local/bin/kube-ipvs cleanup --log-level error >/dev/null || fail "cleanup from the image exited $?"
[ -z "$(ipvsadm -Sn)" ] || fail "cleanup left: $(ipvsadm -Sn)"
! chroot /image iptables-save | grep -q KUBE-IPVS || fail "cleanup left the shim's rules"
echo "image-check: ok (vm): cleanup from the image left nothing"
GUEST
  local adds=(--add "$work/image.tar:/image.tar" --add "$work/guest.sh:/guest.sh"
    --add "$repo/scripts/testdata/agent-once.ipvsadm:/expected.ipvsadm") f
  for f in "$repo"/examples/*.yaml; do adds+=(--add "$f:/examples/$(basename "$f")"); done
  log "booting the IPVS VM to run the image's agent there"
  "$repo/scripts/vm/run.sh" --timeout "${KUBE_IPVS_VM_TIMEOUT:-600}" --mem 1536 "${adds[@]}" -- sh /guest.sh ||
    { rm -rf "$work"; die "the image's agent in the VM (see the console above)"; }
  rm -rf "$work"
}

main "$@"
