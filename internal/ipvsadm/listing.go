// Package ipvsadm renders the IPVS table exactly as ipvsadm 1.31 prints it
// (byte for byte: operators' scripts parse it), and parses ipvsadm's listing
// options. It is pure: the kernel is read elsewhere (dataplane/linux, through
// the Kernel interface) into package ipvstable's types and handed in as a
// Listing; name lookups go through the Names interface. Protocols, flags and
// forwarding methods are model's constants.
//
// The formats follow ipvsadm 1.31's ipvsadm.c (print_title,
// print_service_entry, print_conn, list_all, list_timeout, list_daemon) and
// libipvs (sorting, the netlink attribute parsing), including their quirks,
// each noted where it is reproduced.
package ipvsadm

import "github.com/kube-ipvs/kube-ipvs/internal/ipvstable"

// Listing is everything ipvsadm's listings show, as read from the kernel.
type Listing struct {
	Info     ipvstable.Info
	Services []ipvstable.Service // in the kernel's dump order
	Timeouts ipvstable.Timeouts
	Daemons  []ipvstable.Daemon
}

// fwdUnknown is what glibc's printf prints for ipvsadm's NULL name of a
// forwarding method it does not know.
const fwdUnknown = "(null)"
