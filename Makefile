# kube-ipvs. `make test` is what CI runs; `make demo` shows the agent at work
# in a throwaway VM with a real IPVS kernel. Both install what they need.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
BIN      := bin/kube-ipvs
# The image's platforms: one static agent each, bin/kube-ipvs-OS-ARCH.
PLATFORMS ?= linux/amd64 linux/arm64
# make release: the image the manifests name, and where the release goes.
IMAGE    ?= kube-ipvs:$(VERSION)
DIST     ?= dist/$(VERSION)

.PHONY: all build static static-platforms image image-check image-arm64 release test unit contract agent-vm ipvsadm-vm shim-vm e2e cluster-vm cluster-e2e fault-vm cluster-vm-faults bench bench-quick coldstart conntrack-bench ipvs-ops-bench apicost demo vet fmt clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kube-ipvs

# A static binary: what the VM and the container image run.
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kube-ipvs

# The static agent cross-compiled for each of the image's platforms.
static-platforms:
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo "GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -o bin/kube-ipvs-$$os-$$arch"; \
	  GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kube-ipvs-$$os-$$arch ./cmd/kube-ipvs; \
	done

# The DaemonSet's OCI image, bin/kube-ipvs-image.oci.tar: one image index of
# linux/amd64 and linux/arm64, built with no container daemon, no image
# registry and no emulation: each architecture's Debian iptables, ipset and
# conntrack extracted by mmdebstrap, the static agent on top, umoci.
image: static static-platforms
	KUBE_IPVS_PLATFORMS='$(PLATFORMS)' KUBE_IPVS_VERSION='$(VERSION)' scripts/image.sh

# A release a cluster installs, into dist/VERSION/: the image archive (both
# platforms), its SBOM (SPDX), the manifests naming the versioned image and
# SHA256SUMS. make release VERSION=v1.2.3 [IMAGE=NAME:TAG] [DIST=DIR]
release: static-platforms
	VERSION='$(VERSION)' IMAGE='$(IMAGE)' DIST='$(DIST)' KUBE_IPVS_PLATFORMS='$(PLATFORMS)' scripts/release.sh

# The image proven: unpacked into bin/kube-ipvs-image/, its entrypoint, its
# iptables and the agent's shim run from its own root file system in a fresh
# network namespace; the arm64 image's agent and tools run under qemu-user;
# then, in the IPVS VM, its agent programs examples/.
image-check: image
	scripts/image-check.sh --vm

# The arm64 image started under qemu-user from its own root file system: its
# agent's version names linux/arm64, its agent and tools start.
image-arm64: image
	scripts/image-check.sh --arm64

# Everything: pure-logic and fake-kernel tests here, then on a real IPVS
# kernel in the VM: the dataplane contract suite, the agent itself, and the
# ipvsadm-compatible listing against the real ipvsadm; then the agent against
# a real kube-apiserver under its RBAC; the arm64 image under qemu-user; last,
# a four-node cluster in the VM.
test: vet unit contract agent-vm ipvsadm-vm shim-vm e2e cluster-vm image-arm64 cluster-e2e

# The benchmark's own module (its report, its percentiles) is tested here
# too: `make bench` is not part of CI, and its verdicts must not rot. So is
# manifests/check, which builds the kustomizations with kustomize and checks
# the Prometheus Operator objects against the operator's CRDs: a module of
# its own, so that neither is a dependency of the agent.
unit:
	$(GO) test -count=1 ./...
	cd e2e/bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd manifests/check && $(GO) vet ./... && $(GO) test -count=1 ./...

contract:
	scripts/contract-vm.sh

agent-vm:
	scripts/agent-vm.sh

# `kube-ipvs ipvsadm ARGS` against the real ipvsadm, byte for byte.
ipvsadm-vm:
	scripts/ipvsadm-vm.sh

# The netfilter shim with real traffic: node and hairpin to ClusterIPs,
# NodePorts by traffic policy, health-check ports, source ranges, reject
# without endpoints, cleanup --kube-proxy.
shim-vm:
	scripts/shim-vm.sh

# Real traffic through real IPVS: the end-to-end scenarios (e2e/) in the VM.
e2e:
	scripts/e2e-vm.sh

# The agent in the VM against a real kube-apiserver + etcd on this machine,
# under the narrow RBAC of manifests/kube-ipvs.yaml (first run builds them: minutes).
cluster-vm:
	scripts/cluster-vm.sh

# Four nodes (network namespaces) in the VM against the real API server:
# migration from kube-proxy node by node, traffic policies across nodes, a
# rolling upgrade, one node back to kube-proxy, all under load; node 4 runs
# the agent from the image's root file system. Prints a report.
cluster-e2e: image
	scripts/cluster-e2e.sh

# Faults, not part of `test`: each run takes many minutes under
# emulation. fault-vm: the agent SIGKILLed at random points of a sync of
# thousands of Services, then converging with zero orphans and the foreign
# (keepalived-like) state intact; the xtables lock held while /healthz and
# /metrics must keep answering. cluster-vm-faults: API server restarts and etcd compacted
# past the agent's watches, mid-churn: it relists, converges, and prunes no
# virtual server of a Service that still exists.
# Kernel-operation failures through the fake are in `unit`
# (internal/reconciler/fault_test.go).
fault-vm:
	scripts/fault-vm.sh

cluster-vm-faults:
	KUBE_IPVS_CLUSTER_TEST=TestAgentSurvivesAPIServerFaults scripts/cluster-vm.sh

# kube-ipvs beside kube-proxy (IPVS and nftables modes) at N = 1k, 5k, 10k
# Services × 10 endpoints, endpoints naming no node, one in ten and all on
# the node, three runs of every tool per boot, in the VM against a real API
# server; appends a section (medians, the goals met or missed, a plot) to
# docs/benchmarks.md. Not part of `test`: it takes a day at the default
# sizes (scripts/bench.sh lists the settings). bench-quick checks the
# harness in about half an hour and writes to bin/bench-quick/, not the doc.
bench:
	scripts/bench.sh

bench-quick:
	BENCH_N=200 BENCH_VARIANTS=tenth BENCH_RUNS=1 BENCH_CHANGES=15 BENCH_BURST=50 \
	BENCH_SETTLE_LIMIT=60s BENCH_COLD_TIMEOUT=5m BENCH_VM_TIMEOUT=2h \
	BENCH_DOC=$(CURDIR)/bin/bench-quick/benchmarks.md scripts/bench.sh

# The cold path alone, without an API server: agent --manifests --once at
# N = 1k, 5k (COLDSTART_NS to choose) Services × 10 endpoints in the VM,
# timed; COLDSTART_PROFILE=1 adds Go CPU profiles, COLDSTART_VIPS=1 times
# VIPs as addresses against local routes, COLDSTART_FAMILIES="ipv4 dual"
# dual-stack Services against IPv4 ones. Not part of `test`.
coldstart:
	scripts/coldstart-vm.sh $(COLDSTART_NS)

# One cleanup of stale UDP conntrack entries (ClearConntrack, 200 removed
# real servers) in a table of 200,000 entries, timed in the VM
# (BenchmarkClearConntrack; KUBE_IPVS_CT_ENTRIES, KUBE_IPVS_CT_UDP to size
# it). Prints numbers; minutes under emulation. Not part of `test`.
conntrack-bench:
	scripts/conntrack-bench-vm.sh

# What IPVS itself costs per real server operation as a virtual server
# grows: one endpoint at a time rolled through virtual servers of 1,000 and
# 10,000 real servers in the VM (BenchmarkRollingRealServer;
# KUBE_IPVS_ROLL_SIZES to choose), and a read of their counters. Prints
# numbers; about a minute. Not part of `test`.
ipvs-ops-bench:
	scripts/ipvs-ops-bench-vm.sh

# What one node's watch path costs the API server and the node over
# HTTP/1.1 and HTTP/2, gzip and identity: connections, bytes of the first
# list and per change, CPU of both sides, against a real kube-apiserver
# (scripts/apicost.sh lists the settings). Prints a table; minutes at the
# default sizes. Not part of `test`.
apicost:
	scripts/apicost.sh

demo:
	scripts/demo.sh

vet:
	@test -z "$$(gofmt -l cmd internal e2e 2>/dev/null)" || { gofmt -l cmd internal e2e; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

fmt:
	gofmt -w cmd internal

clean:
	rm -rf bin
