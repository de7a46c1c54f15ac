// Package model holds the value types every other package shares: the keys
// and the desired/observed shape of the IPVS table and the VIPs bound on the
// agent's link. Values only: no kernel, no clients, no clock.
package model
