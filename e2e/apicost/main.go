// Command apicost measures what one node's watch path costs the API server
// and the node, over each transport the agent can use: connections and
// bytes of the first list and per change, the client's CPU for the first
// list, and the API server's CPU for it. It runs the agent's own watch
// path (source.NewClient, source.Kubernetes, objects.Store) in a child
// process, through a byte- and connection-counting TCP proxy to a real
// kube-apiserver, for {HTTP/1.1, HTTP/2} x {gzip, identity}. The events
// recorder and the agent's other requests are not run: this is the watch
// path alone. scripts/apicost.sh runs it against scripts/apiserver/run.sh.
//
//	apicost run --kubeconfig ADMIN --apiserver-pid PID [--ns 1000,5000] ...
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: apicost run|client [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runMain(os.Args[2:])
	case "client":
		err = clientMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (run or client)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicost:", err)
		os.Exit(1)
	}
}
