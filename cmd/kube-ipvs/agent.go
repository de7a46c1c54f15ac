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

// runAgent parses the agent's command line and runs the agent on it
// (agent.Run), or writes the configuration it means (--write-config-to).
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code := parseAgent(args, stdout, stderr)
	if code >= 0 {
		return code
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
		return o.writeConfigAndExit(log)
	}
	stopProfiles, err := startProfiles(o.files, log)
	if err != nil {
		log.Error("start the CPU profile", zap.Error(err))
		return 1
	}
	defer stopProfiles()
	ctx, stop := followConfig(ctx, args, o, log)
	defer stop()
	err = agent.Run(ctx, agent.Options{Config: o.Config, DryRunTable: o.dryRunTable, Stdin: os.Stdin, Stdout: stdout, Log: log, Version: version})
	return agentExit(ctx, o, err, log)
}

// agentExit is the exit code of an agent run that ended with err, and
// logs why it ended.
func agentExit(ctx context.Context, o agentOptions, err error, log *zap.Logger) int {
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
