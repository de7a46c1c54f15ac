package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"go.uber.org/zap"
)

// startCPUProfile writes a CPU profile of the run to path until the
// returned func is called (issue 12: where a cold start's time goes is
// measured in the VM, on the real kernel, not guessed).
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("profile to %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// writeHeapProfile writes the heap profile to path as the run ends: what
// is live (after a collection) and what the whole run allocated, where
// (issue 12: the resident set at 10,000 Services is measured in the VM).
func writeHeapProfile(path string, log *zap.Logger) {
	runtime.GC()
	f, err := os.Create(path)
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		log.Error("write the heap profile", zap.String("file", path), zap.Error(err))
	}
}
