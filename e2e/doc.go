// Package e2e is the end-to-end suite: real traffic through real IPVS.
//
// It runs inside the throwaway IPVS-kernel VM (scripts/e2e-vm.sh, `make
// e2e`): backend "pods" are network namespaces running the echo tool
// (e2e/tools/echo), the client is another namespace, and the kube-ipvs agent
// follows a manifest folder the tests rewrite between steps, so every
// endpoint change is a real file change the running agent picks up. Every
// scenario asserts on what clients actually receive and on the kernel table.
//
// Outside the VM the tests skip (KUBE_IPVS_VM is unset), unless
// KUBE_IPVS_REQUIRE_KERNEL=1 is set, which turns the skip into a failure:
// the VM runner sets it so that a suite that cannot reach a kernel never
// passes by skipping.
package e2e
