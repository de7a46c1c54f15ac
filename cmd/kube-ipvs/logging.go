package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/kube-ipvs/kube-ipvs/internal/config"
	"github.com/kube-ipvs/kube-ipvs/internal/logv"
)

// newLoggerTo builds the zap logger the flags ask for, writing to w: the
// JSON format is component-base's (kube-proxy's --logging-format=json),
// the text format zap's console lines. A line shows when its level is at
// least the threshold --log-level or -v sets; klog's V(n) lines, and
// kube-ipvs's own detail (package logv), show when n <= -v.
func newLoggerTo(c config.Config, w zapcore.WriteSyncer) (*zap.Logger, error) {
	level, err := logThreshold(c.LogLevel)
	if err != nil {
		return nil, err
	}
	if c.LogFormat == "json" {
		core := zapcore.NewCore(zapcore.NewJSONEncoder(componentBaseJSON()), w, level)
		return zap.New(componentBaseFields{core}, zap.AddCaller()), nil
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.EncodeLevel = textLevel
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), w, level)), nil
}

// logThreshold is the least zap level --log-level shows: "error" and
// "warn" name zap's, the others a klog verbosity (info 0, debug 4), whose
// V(n) lines zapr logs at zap level -n.
func logThreshold(level string) (zapcore.Level, error) {
	switch level {
	case "error":
		return zapcore.ErrorLevel, nil
	case "warn":
		return zapcore.WarnLevel, nil
	}
	v, ok := config.VerbosityOfLogLevel(level)
	if !ok {
		return 0, fmt.Errorf("--log-level: want error, warn, info, debug or a klog verbosity, got %q", level)
	}
	return logv.V(v), nil
}

// componentBaseJSON is the encoder of k8s.io/component-base/logs/json,
// kube-proxy's JSON format, key for key: "ts" (milliseconds since the
// epoch, a float), "logger" (the logger's name), "caller" (file:line),
// "msg", and no level key ("v" stands for it, see componentBaseFields).
func componentBaseJSON() zapcore.EncoderConfig {
	return zapcore.EncoderConfig{
		MessageKey:     "msg",
		CallerKey:      "caller",
		NameKey:        "logger",
		TimeKey:        "ts",
		EncodeTime:     epochMillis,
		EncodeDuration: zapcore.StringDurationEncoder,
		EncodeCaller:   zapcore.ShortCallerEncoder,
	}
}

func epochMillis(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
	enc.AppendFloat64(float64(t.UnixNano()) / float64(time.Millisecond))
}

// componentBaseFields gives each line the fields component-base's logger
// (zapr with LogInfoLevel("v") and ErrorKey("err")) gives it: every line
// below error level its klog verbosity as "v" (a warning is klog's info,
// "v":0), and an error under "err", last on an error line. kube-ipvs logs
// its errors under "error" (zap.Error, or the text of one); so does zapr
// for klog's.
type componentBaseFields struct{ zapcore.Core }

func (c componentBaseFields) With(fs []zapcore.Field) zapcore.Core {
	fs = append([]zapcore.Field(nil), fs...)
	for i := range fs {
		renameErr(&fs[i])
	}
	return componentBaseFields{c.Core.With(fs)}
}

func (c componentBaseFields) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c componentBaseFields) Write(e zapcore.Entry, fs []zapcore.Field) error {
	out := make([]zapcore.Field, 0, len(fs)+1)
	if e.Level < zapcore.ErrorLevel {
		out = append(out, zap.Uint32("v", logv.Of(e.Level)))
	}
	var errs []zapcore.Field
	for _, f := range fs {
		if renameErr(&f) && e.Level >= zapcore.ErrorLevel {
			errs = append(errs, f)
			continue
		}
		out = append(out, f)
	}
	return c.Core.Write(e, append(out, errs...))
}

// renameErr files an error under "err", as kube-proxy's lines have it,
// and tells whether f is one: a field named "error", or an error named
// "err".
func renameErr(f *zapcore.Field) bool {
	if f.Key != "error" && (f.Key != "err" || f.Type != zapcore.ErrorType) {
		return false
	}
	f.Key = "err"
	return true
}

// textLevel names a level in the text format as zap does, every klog
// verbosity below info being zap's DEBUG (zap would print "LEVEL(-4)").
func textLevel(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
	zapcore.CapitalLevelEncoder(max(l, zapcore.DebugLevel), enc)
}

// routeKlog sends klog's output through log, named "klog": client-go
// (reflectors, the event broadcaster, client-side throttling) logs with
// klog, in its own format on stderr unless told otherwise, and one process
// should write one format that one parser reads. Contextual logging is on,
// so klog.FromContext and klog.Background hand out the same logger.
//
// klog's verbosity is the one --log-level or -v sets, as kube-proxy's -v
// is klog's: klog decides on its V(n) lines by its own verbosity before
// they reach log (whose level then passes them). Info, warnings (as info,
// which is what klog hands a logr.Logger) and errors come through.
func routeKlog(log *zap.Logger, level string) {
	v, _ := config.VerbosityOfLogLevel(level)
	setKlogVerbosity(v)
	klog.SetLoggerWithOptions(zapr.NewLogger(log.Named("klog")),
		klog.ContextualLogger(true),
		klog.FlushLogger(func() { _ = log.Sync() }))
}

// setKlogVerbosity sets klog's -v, which klog offers only as a flag.
func setKlogVerbosity(v uint32) {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	_ = fs.Set("v", strconv.FormatUint(uint64(v), 10))
}
