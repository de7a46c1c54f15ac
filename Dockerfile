# kube-ipvs node agent image. The agent talks netlink itself (IPVS, links,
# ipset members, conntrack); ipvsadm is not needed at run time. Its netfilter
# shim writes a few iptables rules with iptables-save/-restore, so the image
# carries iptables (both the nft and the legacy flavour: the agent uses the
# one the node uses).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /kube-ipvs ./cmd/kube-ipvs

FROM debian:trixie-slim
RUN apt-get update && apt-get install -y --no-install-recommends iptables && rm -rf /var/lib/apt/lists/*
COPY --from=build /kube-ipvs /usr/local/bin/kube-ipvs
ENTRYPOINT ["/usr/local/bin/kube-ipvs"]
CMD ["agent"]
