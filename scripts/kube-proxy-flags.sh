#!/usr/bin/env bash
# kube-proxy-flags.sh: regenerate cmd/kube-ipvs/testdata/kube-proxy-<version>.flags,
# the flags kube-proxy itself defines, which TestAgentTakesKubeProxysFlags
# compares the agent's flag set with. A tiny program builds kube-proxy's own
# command (k8s.io/kubernetes/cmd/kube-proxy/app.NewProxyCommand, with the
# JSON log format registered and the logging flags component-base's cli.Run
# adds, as cmd/kube-proxy/proxy.go runs it) and prints one line per flag:
# its name, its pflag type and, for a flag that takes no value (a boolean),
# the value a bare flag sets. Nothing here is written by hand.
# Not part of `make test`: run it when the Kubernetes release moves, and
# commit what changed. Modules come from the Go module proxy, as
# scripts/apiserver/build.sh builds kube-proxy.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${KUBE_VERSION:-}" ]; then
  cg=$(cd "$root" && go list -m -f '{{.Version}}' k8s.io/client-go)
  KUBE_VERSION="v1.${cg#v0.}"
fi
staging_version="v0.${KUBE_VERSION#v1.}"
out="$root/cmd/kube-ipvs/testdata/kube-proxy-${KUBE_VERSION}.flags"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-trimpath CGO_ENABLED=0 GOWORK=off
cd "$work"
go mod init kube-ipvs.test/kube-proxy-flags >/dev/null 2>&1
gomod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
go mod edit -require="k8s.io/kubernetes@${KUBE_VERSION}"
# k8s.io/kubernetes points its staging modules at ./staging/...: use the
# published releases instead.
for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "$gomod"); do
  case "$m" in k8s.io/sample-*) continue ;; esac
  go mod edit -replace="$m=$m@${staging_version}"
done
go mod edit -go="$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")"
cat >main.go <<'GO'
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register" // as cmd/kube-proxy/proxy.go: the JSON format's flags
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	cmd := app.NewProxyCommand()
	logs.AddFlags(cmd.PersistentFlags()) // what cli.Run adds
	cmd.InitDefaultHelpFlag()
	seen := map[string]*pflag.Flag{}
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags()} {
		fs.VisitAll(func(f *pflag.Flag) { seen[f.Name] = f })
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stdout, "# kube-proxy's flags: name, type, the value of a bare flag (scripts/kube-proxy-flags.sh)\n")
	for _, n := range names {
		f := seen[n]
		line := n + " " + f.Value.Type()
		if f.NoOptDefVal != "" {
			line += " " + f.NoOptDefVal
		}
		fmt.Println(line)
	}
}
GO
GOFLAGS="$GOFLAGS -mod=mod" go get "k8s.io/kubernetes/cmd/kube-proxy/app@${KUBE_VERSION}" >&2
GOFLAGS="$GOFLAGS -mod=mod" go mod tidy >&2
go run . >"$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
