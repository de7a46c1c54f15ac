package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"go.uber.org/zap"
)

// startProfiles starts the profiles the hidden flags ask for; the func
// returned stops the CPU profile and writes the heap profile.
func startProfiles(f files, log *zap.Logger) (stop func(), err error) {
	stopCPU := func() {}
	if f.cpuProfile != "" {
		if stopCPU, err = startCPUProfile(f.cpuProfile); err != nil {
			return nil, err
		}
	}
	return func() {
		if f.heapProfile != "" {
			writeHeapProfile(f.heapProfile, log)
		}
		stopCPU()
	}, nil
}

// startCPUProfile writes a CPU profile of the run to path until the
// returned func is called: where a cold start's time goes is measured in
// the VM, on the real kernel, not guessed.
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
// is live (after a collection) and what the whole run allocated, where.
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
