package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/kube-ipvs/kube-ipvs/internal/agent"
)

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code := parseAgent(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	if o.dryRunTable != "" && !o.DryRun {
		fmt.Fprintln(stderr, "kube-ipvs agent: --dry-run-table is the table a --dry-run plans against: give --dry-run too")
		return 2
	}
	log, err := newLogger(o.Config)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	routeKlog(log, o.LogLevel)
	o.warn(log)
	if o.writeConfigTo != "" {
		if err := o.writeConfig(); err != nil {
			log.Error("write configuration", zap.Error(err))
			return 1
		}
		log.Info("wrote configuration", zap.String("file", o.writeConfigTo))
		return 0
	}
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			log.Error("start the CPU profile", zap.Error(err))
			return 1
		}
		defer stop()
	}
	if o.heapProfile != "" {
		defer writeHeapProfile(o.heapProfile, log)
	}
	ctx, stop := followConfig(ctx, args, o, log)
	defer stop()
	err = agent.Run(ctx, agent.Options{Config: o.Config, DryRunTable: o.dryRunTable, Stdin: os.Stdin, Stdout: stdout, Log: log, Version: version})
	if errors.Is(context.Cause(ctx), errConfigChanged) {
		log.Error("the config file changed: exiting so that the pod restarts with it, as kube-proxy does", zap.String("config", o.files.config))
		return 1
	}
	if err != nil {
		log.Error("agent failed", zap.Error(err))
		return 1
	}
	return 0
}

// followConfig ends ctx with errConfigChanged when the --config file
// changes to a configuration the same command line accepts; a run that
// ends by itself (--once, --dry-run) or has no file is left alone.
func followConfig(ctx context.Context, args []string, o agentOptions, log *zap.Logger) (context.Context, context.CancelFunc) {
	if o.files.config == "" || o.Once || o.DryRun {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	check := func() error {
		var msg bytes.Buffer
		if _, code := parseAgent(args, io.Discard, &msg); code >= 0 {
			return errors.New(strings.TrimSpace(msg.String()))
		}
		return nil
	}
	go func() { cancel(watchConfig(ctx, o.files.config, o.configData, check, log)) }()
	return ctx, func() { cancel(nil) }
}
