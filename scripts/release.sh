#!/usr/bin/env bash
# release.sh: write a release a cluster can install into $DIST (`make release
# VERSION=vX.Y.Z`, which builds the agents first):
#
#   kube-ipvs-VERSION.oci.tar     the OCI image layout (scripts/image.sh): one
#                                 index of linux/amd64 and linux/arm64, named
#                                 $IMAGE (containerd's importer reads the name)
#   kube-ipvs-VERSION.spdx.json   the SBOM, SPDX 2.3: each platform's agent with
#                                 its Go modules, and the Debian packages of its
#                                 root file system, read from the image itself
#   manifests/                    manifests/ with the DaemonSet's image set to
#                                 $IMAGE (and the kustomization's image too)
#   kube-ipvs-VERSION-manifests.tar.gz   the same, as one archive
#   SHA256SUMS                    of every file above
#
# VERSION: vMAJOR.MINOR.PATCH[-PRERELEASE]. IMAGE: the image reference the
# manifests name, default kube-ipvs:VERSION; a cluster pulling from a
# registry sets its own (IMAGE=REGISTRY/kube-ipvs:VERSION). Root only (the
# image build).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
version=${VERSION:-}
image=${IMAGE:-kube-ipvs:$version}
dist=$(realpath -m "${DIST:-$repo/dist/$version}")
platforms=${KUBE_IPVS_PLATFORMS:-linux/amd64 linux/arm64}

log() { echo "release: $*" >&2; }
die() { echo "release: error: $*" >&2; exit 1; }

[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION=$version: want vMAJOR.MINOR.PATCH[-PRERELEASE] (make release VERSION=v1.2.3)"
# The tag is what follows the last ":" after the last "/" (a registry's
# port is not a tag); a digest reference cannot name what is being built.
[[ $image != *@* ]] || die "IMAGE=$image: a digest cannot name the image being built; give NAME:TAG"
name_part=${image##*/}
[[ $name_part == *:* ]] || die "IMAGE=$image has no tag"
tag=${name_part##*:}
image_name=${image%:"$tag"}
[ "$(id -u)" = 0 ] || die "must run as root (the image build)"
: "${SOURCE_DATE_EPOCH:=$(git -C "$repo" log -1 --format=%ct)}"
export SOURCE_DATE_EPOCH

rm -rf "$dist"
mkdir -p "$dist"
archive=$dist/kube-ipvs-$version.oci.tar

log "image $image ($platforms)"
KUBE_IPVS_IMAGE=$archive KUBE_IPVS_IMAGE_TAG=$tag KUBE_IPVS_IMAGE_NAME=$image \
  KUBE_IPVS_VERSION=$version KUBE_IPVS_PLATFORMS=$platforms "$here/image.sh" build

# The SBOM describes what the image holds: each platform's agent and dpkg
# status file, unpacked from the archive just written.
work=$(mktemp -d)
# shellcheck disable=SC2064
trap "rm -rf '$work'" EXIT
sbom_args=()
for platform in $platforms; do
  bundle=$work/${platform//\//-}
  KUBE_IPVS_IMAGE=$archive KUBE_IPVS_IMAGE_TAG=$tag "$here/image.sh" unpack "$bundle" "$platform"
  sbom_args+=(-platform "$platform=$bundle/rootfs/usr/local/bin/kube-ipvs,$bundle/rootfs/var/lib/dpkg/status")
done
(cd "$repo" && go run ./cmd/kube-ipvs-sbom -version "$version" -image "$image" "${sbom_args[@]}" \
  -o "$dist/kube-ipvs-$version.spdx.json")
log "SBOM: $(jq '.packages | length' "$dist/kube-ipvs-$version.spdx.json") packages"

# The manifests: every file of manifests/ but its Go package, the
# DaemonSet's development image replaced by the release's.
cp -R "$repo/manifests" "$dist/manifests"
find "$dist/manifests" -name '*.go' -delete
grep -rlF 'image: kube-ipvs:dev' "$dist/manifests" | xargs -r sed -i "s|image: kube-ipvs:dev\$|image: $image|"
kustomization=$dist/manifests/kustomization.yaml
if [ -f "$kustomization" ]; then
  # kustomize's images: entry for kube-ipvs would set the image back to the
  # development tag: the release names its own.
  awk -v name="$image_name" -v tag="$tag" '
    /^images:/ { skip = 1; next }
    skip && /^[^ #-]/ { skip = 0 }
    skip { next }
    { print }
    END { print "images:"; print "- name: kube-ipvs"; print "  newName: " name; print "  newTag: " tag }
  ' "$kustomization" >"$kustomization.tmp"
  mv "$kustomization.tmp" "$kustomization"
fi
! grep -rn 'kube-ipvs:dev\|newTag: dev' "$dist/manifests" || die "the release's manifests still name the development image"
grep -q "image: $image\$" "$dist/manifests/kube-ipvs.yaml" || die "manifests/kube-ipvs.yaml does not name $image"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  -C "$dist" -czf "$dist/kube-ipvs-$version-manifests.tar.gz" manifests

(cd "$dist" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || die "SHA256SUMS does not check"
chmod -R a+rX "$dist"
log "wrote $dist:"
(cd "$dist" && find . -maxdepth 1 -type f -printf '%P\n' | LC_ALL=C sort | while read -r f; do
  printf '  %-40s %s\n' "$f" "$(du -h "$f" | cut -f1)"
done) >&2
