# kube-ipvs node agent image, for people with a container daemon. `make image`
# builds the same image without one (scripts/image.sh): both take the root file
# system from scripts/image.sh's recipe, so the contents and the entrypoint agree
# (scripts/image-check.sh compares ENTRYPOINT and CMD with this file).
#
# The agent talks netlink itself (IPVS, links, ipset members, conntrack);
# ipvsadm is not needed at run time. Its netfilter shim writes a few iptables
# rules with iptables-save/-restore, so the image carries iptables (both the
# nft and the legacy flavour: the agent uses the one the node uses), plus ipset
# and conntrack for debugging a node from the pod. No shell, no apt.
#
# Multi-platform (docker buildx build --platform linux/amd64,linux/arm64):
# both build stages run on the build machine's platform, with no emulation:
# Go cross-compiles, and the target architecture's packages are extracted
# without running anything from them.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /kube-ipvs ./cmd/kube-ipvs

FROM --platform=$BUILDPLATFORM debian:trixie-slim AS rootfs
ARG TARGETARCH=amd64
COPY scripts/image.sh /image.sh
RUN /image.sh rootfs /rootfs ${TARGETARCH}

FROM scratch
COPY --from=rootfs /rootfs/ /
COPY --from=build /kube-ipvs /usr/local/bin/kube-ipvs
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/usr/local/bin/kube-ipvs"]
CMD ["agent"]
