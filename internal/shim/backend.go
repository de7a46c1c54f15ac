package shim

import (
	"fmt"
	"strings"
)

// Backend is the iptables flavour a node uses: the nf_tables-backed
// iptables-nft or the old x_tables iptables-legacy. Rules written with the
// other one would sit in a table nobody else looks at.
type Backend string

const (
	BackendNFT    Backend = "nft"
	BackendLegacy Backend = "legacy"
	// BackendDetect leaves the choice to the node (see ChooseBackend).
	BackendDetect Backend = ""
)

// Validate explains why b is not a backend, nil if it is one (or detect).
func (b Backend) Validate() error {
	switch b {
	case BackendNFT, BackendLegacy, BackendDetect:
		return nil
	}
	return fmt.Errorf("want nft or legacy (or leave it out to detect), got %q", string(b))
}

// CountRules counts the rules (lines starting "-A") in iptables-save output.
func CountRules(save string) int {
	n := 0
	for _, line := range strings.Split(save, "\n") {
		if strings.HasPrefix(line, "-A ") {
			n++
		}
	}
	return n
}

// ChooseBackend picks the backend holding more rules, as the iptables
// wrapper scripts kube-proxy's image ships do: whoever set up the node
// (kubelet, the CNI plugin, the distribution) used that one. A tie (a bare
// node) goes to nft, today's default, when it is available.
func ChooseBackend(nftRules, legacyRules int, nftOK, legacyOK bool) Backend {
	switch {
	case nftOK && !legacyOK:
		return BackendNFT
	case legacyOK && !nftOK:
		return BackendLegacy
	case legacyRules > nftRules:
		return BackendLegacy
	}
	return BackendNFT
}

// Command is the binary of a tool ("iptables-save", "ip6tables-restore")
// for the backend: "iptables-nft-save", "ip6tables-legacy-restore".
func (b Backend) Command(tool string) string {
	if b == BackendDetect {
		return tool // the node's plain iptables, whatever it is
	}
	prefix, rest, ok := strings.Cut(tool, "-")
	if !ok {
		return tool + "-" + string(b)
	}
	return prefix + "-" + string(b) + "-" + rest
}
