#!/usr/bin/env bash
# build.sh: build kube-apiserver, kube-proxy and etcd once, from the Go module
# proxy (and kubeadm too when called as `build.sh kubeadm`), into
#   ${KUBE_IPVS_CACHE:-$HOME/.cache/kube-ipvs}/apiserver/<k8s-version>-etcd<etcd-version>/
# and print that bin dir on stdout (progress goes to stderr). kube-proxy is the
# reference `make bench` compares the agent with; once kube-apiserver's build
# cache is warm it takes seconds more. kubeadm is built only on request: it
# writes the kube-proxy ConfigMap and DaemonSet the tests compare with
# (scripts/kubeadm-testdata.sh), nothing runs it in `make test`.
#
# Nothing of Kubernetes is vendored here: each binary is built from a tools
# module generated in a temp dir. kube-apiserver's module (k8s.io/kubernetes)
# points its staging modules at ./staging/...; a module that requires it must
# replace each of them with the matching published v0.X.Y release. etcd's
# server module has replace directives of its own, so `go install pkg@v`
# refuses it; a tools module that requires it builds fine.
#
# Versions: KUBE_VERSION (default: the k8s.io/client-go the repo uses, as
# v1.X.Y) and ETCD_VERSION. A cold build needs several minutes, a few GB of
# module/build cache, and about 3 GB of RAM to link kube-apiserver.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
log() { echo "apiserver/build: $*" >&2; }

if [ -z "${KUBE_VERSION:-}" ]; then
  # client-go v0.X.Y ships with Kubernetes v1.X.Y: test against the same release.
  cg=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/client-go)
  KUBE_VERSION="v1.${cg#v0.}"
fi
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
staging_version="v0.${KUBE_VERSION#v1.}"

cache=${KUBE_IPVS_CACHE:-$HOME/.cache/kube-ipvs}/apiserver/${KUBE_VERSION}-etcd${ETCD_VERSION}
extra=
case "${1:-}" in
"") ;;
kubeadm) extra=kubeadm ;;
*) log "unknown tool $1 (only kubeadm is built on request)"; exit 2 ;;
esac
built() { [ -x "$cache/kube-apiserver" ] && [ -x "$cache/kube-proxy" ] && [ -x "$cache/etcd" ] && { [ -z "$extra" ] || [ -x "$cache/$extra" ]; }; }
if built; then
  echo "$cache"
  exit 0
fi
mkdir -p "$cache"

# openssl makes the service-account key pair in run.sh; install it with the build.
if ! command -v openssl >/dev/null; then
  log "installing openssl"
  apt-get install -y -qq openssl >&2 || { apt-get update -qq >&2 && apt-get install -y -qq openssl >&2; }
fi

# One builder at a time per cache dir; a second caller waits, then finds the binaries.
exec 9>"$cache/.lock"
flock 9
if built; then
  echo "$cache"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-trimpath CGO_ENABLED=0 GOWORK=off

# build_kube CMD: k8s.io/kubernetes/cmd/CMD from one shared tools module.
build_kube() {
  local cmd=$1 t="$work/kube" gomod
  if [ -f "$t/go.mod" ]; then
    cd "$t"
    build_kube_cmd "$cmd"
    return
  fi
  mkdir -p "$t"
  cd "$t"
  go mod init kube-ipvs.test/apiserver-tools >/dev/null 2>&1
  # Only the .mod file is needed to learn the staging list (no source download).
  gomod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" 2>/dev/null | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  [ -f "$gomod" ] || { log "cannot fetch k8s.io/kubernetes@${KUBE_VERSION}"; return 1; }
  go mod edit -require="k8s.io/kubernetes@${KUBE_VERSION}"
  # Staging modules: lines "k8s.io/NAME => ./staging/src/k8s.io/NAME".
  # sample-* are not published to the proxy and not needed by kube-apiserver.
  local m
  for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$gomod"); do
    case "$m" in k8s.io/sample-*) continue ;; esac
    go mod edit -replace="$m=$m@${staging_version}"
  done
  go mod edit -go="$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")"
  build_kube_cmd "$cmd"
}

build_kube_cmd() {
  local cmd=$1
  GOFLAGS="$GOFLAGS -mod=mod" go get "k8s.io/kubernetes/cmd/$cmd@${KUBE_VERSION}" >&2
  local pkg=k8s.io/component-base/version
  local minor=${KUBE_VERSION#v1.}
  minor=${minor%%.*}
  go build -ldflags "-s -w -X $pkg.gitVersion=${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor} -X $pkg.gitTreeState=clean" \
    -o "$cache/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv "$cache/$cmd.tmp" "$cache/$cmd"
}

build_etcd() {
  local t="$work/etcd"
  mkdir -p "$t"
  cd "$t"
  go mod init kube-ipvs.test/etcd-tools >/dev/null 2>&1
  GOFLAGS="$GOFLAGS -mod=mod" go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
  go build -ldflags "-s -w" -o "$cache/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$cache/etcd.tmp" "$cache/etcd"
}

start=$(date +%s)
if [ ! -x "$cache/etcd" ]; then
  log "building etcd ${ETCD_VERSION}"
  build_etcd
fi
if [ ! -x "$cache/kube-apiserver" ]; then
  log "building kube-apiserver ${KUBE_VERSION} (cold: several minutes)"
  build_kube kube-apiserver
fi
if [ ! -x "$cache/kube-proxy" ]; then
  log "building kube-proxy ${KUBE_VERSION}"
  build_kube kube-proxy
fi
if [ -n "$extra" ] && [ ! -x "$cache/$extra" ]; then
  log "building $extra ${KUBE_VERSION}"
  build_kube "$extra"
fi
log "built in $(($(date +%s) - start)) s: $("$cache/kube-apiserver" --version) / $("$cache/kube-proxy" --version) / etcd $("$cache/etcd" --version | sed -n 's/^etcd Version: //p')"
echo "$cache"
