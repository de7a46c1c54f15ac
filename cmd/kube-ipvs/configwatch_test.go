package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// configMapVolume lays out a file as kubelet does in a ConfigMap volume:
// config.conf -> ..data/config.conf, ..data -> a timestamped folder.
func configMapVolume(t *testing.T, data []byte) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	writeConfigMap(t, dir, "..2026_01", data)
	if err := os.Symlink("..data/config.conf", filepath.Join(dir, "config.conf")); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, "config.conf")
}

// writeConfigMap is kubelet's atomic update: a new folder, a new ..data
// symlink renamed over the old one.
func writeConfigMap(t *testing.T, dir, ts string, data []byte) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ts, "config.conf"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// The agent stops, for the pod to restart with it, when its config file
// holds a new configuration the command line accepts: written in place or
// swapped in as kubelet updates a ConfigMap volume. The same bytes written
// again, or a configuration it refuses, leave it running.
func TestConfigFileChangeStopsTheAgent(t *testing.T) {
	const old, changed, bad = "mode: ipvs\n", "mode: ipvs\nipvs: {scheduler: lc}\n", "mode: bad\n"
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir, path string)
		want   error
		logged int // "refused" errors
	}{
		{"rewritten in place", func(t *testing.T, _, path string) { rewrite(t, path, changed) }, errConfigChanged, 0},
		{"ConfigMap update", func(t *testing.T, dir, _ string) { writeConfigMap(t, dir, "..2026_02", []byte(changed)) }, errConfigChanged, 0},
		{"same bytes again", func(t *testing.T, dir, _ string) { writeConfigMap(t, dir, "..2026_02", []byte(old)) }, nil, 0},
		{"refused content", func(t *testing.T, dir, path string) {
			writeConfigMap(t, dir, "..2026_02", []byte(bad))
			time.Sleep(2 * configSettle)
			rewrite(t, path, bad) // the same refused bytes again: logged once
		}, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, path := configMapVolume(t, []byte(old))
			check := func() error {
				data, err := os.ReadFile(path)
				if err != nil || bytes.Equal(data, []byte(bad)) {
					return errors.New("refused")
				}
				return nil
			}
			core, logs := observer.New(zapcore.WarnLevel)
			wait := 5 * configSettle
			if tc.want != nil {
				wait = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- watchConfig(ctx, path, []byte(old), check, zap.New(core)) }()
			time.Sleep(50 * time.Millisecond) // the watch is set up
			tc.change(t, dir, path)
			if err := <-done; !errors.Is(err, tc.want) {
				t.Errorf("watchConfig: %v, want %v", err, tc.want)
			}
			if n := logs.FilterMessageSnippet("is refused").Len(); n != tc.logged {
				t.Errorf("%d refusals logged, want %d: %v", n, tc.logged, logs.All())
			}
		})
	}
}

// rewrite writes through the symlinks, as an editor on the node would.
func rewrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// followConfig re-reads the agent's whole command line: a changed file the
// command line accepts ends the agent's context with errConfigChanged; one
// it refuses (here, an empty mode) does not.
func TestFollowConfigRereadsTheCommandLine(t *testing.T) {
	data, err := os.ReadFile(kubeadmFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		from, to  string
		flags     []string
		wantCause error
	}{
		{"accepted", "scheduler: \"\"", "scheduler: lc", nil, errConfigChanged},
		{"refused", "mode: ipvs", `mode: ""`, nil, nil},
		{"accepted with the command line's override", "mode: ipvs", `mode: ""`, []string{"--proxy-mode=ipvs"}, errConfigChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, path := configMapVolume(t, data)
			args := append([]string{"--config", path}, tc.flags...)
			o, _ := parse(t, args...)
			parent, cancel := context.WithTimeout(context.Background(), 10*configSettle)
			defer cancel()
			ctx, stop := followConfig(parent, args, o, zap.NewNop())
			defer stop()
			time.Sleep(50 * time.Millisecond)
			changed := bytes.Replace(data, []byte(tc.from), []byte(tc.to), 1)
			if bytes.Equal(changed, data) {
				t.Fatalf("%q not in the file", tc.from)
			}
			writeConfigMap(t, dir, "..2026_02", changed)
			<-ctx.Done()
			cause := context.Cause(ctx)
			if tc.wantCause == nil && !errors.Is(cause, context.DeadlineExceeded) || tc.wantCause != nil && !errors.Is(cause, tc.wantCause) {
				t.Errorf("cause %v, want %v", cause, tc.wantCause)
			}
		})
	}
}
