// Package logv puts kube-ipvs's detailed log lines at kube-proxy's
// verbosity levels. kube-proxy logs through klog, whose V(n) lines show when
// -v is n or more; zapr, which carries klog's lines into zap, logs V(n) at
// zap level -n. So log.Log(logv.V(logv.Sync), ...) on a *zap.Logger is
// kube-proxy's logger.V(4).Info(...): shown from -v=4 on, and written with
// "v":4 in component-base's JSON.
package logv

import "go.uber.org/zap/zapcore"

// The levels kube-ipvs logs its detail at, each where kube-proxy's IPVS
// mode logs the like (pkg/proxy/ipvs/proxier.go).
const (
	// Problem: one operation the kernel refused, beside the sync's own
	// error (kube-proxy logs what it leaves as it is at V(2)).
	Problem uint32 = 2
	// Service: a Service's virtual servers, one line per Service
	// (kube-proxy's "Adding new service" is V(3)).
	Service uint32 = 3
	// Sync: a sync's or a kernel read's summary, and each operation
	// applied (kube-proxy's "syncProxyRules complete", "Bind address" and
	// "Delete service" are V(4)).
	Sync uint32 = 4
)

// V is the zap level of klog's V(n).
func V(n uint32) zapcore.Level {
	if n > 127 {
		n = 127
	}
	return -zapcore.Level(n)
}

// Of is the klog verbosity of a zap level below info (0 for info and above).
func Of(l zapcore.Level) uint32 {
	if l >= zapcore.InfoLevel {
		return 0
	}
	return uint32(-int(l))
}
