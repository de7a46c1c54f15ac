package main

import (
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
)

// newLoggerTo builds the zap logger the flags ask for, writing to w.
func newLoggerTo(c config.Config, w zapcore.WriteSyncer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		return nil, err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	if c.LogFormat == "json" {
		encoder = zapcore.NewJSONEncoder(enc)
	} else {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	return zap.New(zapcore.NewCore(encoder, w, level)), nil
}

// routeKlog sends klog's output through log, named "klog": client-go
// (reflectors, the event broadcaster, client-side throttling) logs with
// klog, in its own format on stderr unless told otherwise, and one process
// should write one format that one parser reads. Contextual logging is on,
// so klog.FromContext and klog.Background hand out the same logger.
//
// klog's own verbosity stays at 0: its V(n) lines (n >= 1) are chatter
// about watches and caches, and zapr would map them below zap's debug
// level anyway. Info, warnings (as info, which is what klog hands a
// logr.Logger) and errors come through.
func routeKlog(log *zap.Logger) {
	klog.SetLoggerWithOptions(zapr.NewLogger(log.Named("klog")),
		klog.ContextualLogger(true),
		klog.FlushLogger(func() { _ = log.Sync() }))
}
