# kube-ipvs node agent image. The agent talks netlink itself; ipvsadm is
# not needed at run time (a later `kube-ipvs ipvsadm` replaces it).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /kube-ipvs ./cmd/kube-ipvs

FROM gcr.io/distroless/static-debian12
COPY --from=build /kube-ipvs /usr/local/bin/kube-ipvs
ENTRYPOINT ["/usr/local/bin/kube-ipvs"]
CMD ["agent"]
