package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// errConfigChanged stops the agent when its --config file holds a new,
// valid configuration: the pod restarts and reads it through the same path
// as at start, as kube-proxy exits when its file changes
// (cmd/kube-proxy/app/options.go, eventHandler). A restart against an
// unchanged cluster plans nothing, and the kernel keeps serving meanwhile,
// so this costs less than applying each setting live would risk.
var errConfigChanged = errors.New("the config file changed")

// configRecheck is how often the file is read again besides the events, in
// case one is missed (an editor's rename, an overlay filesystem).
const configRecheck = time.Minute

// configSettle is how long the folder must be quiet before the file is
// read: a write in place truncates first, and a half-written file is
// neither the old configuration nor the new.
const configSettle = 200 * time.Millisecond

// watchConfig returns errConfigChanged once the file at path holds other
// bytes than loaded and check accepts them, or nil when ctx ends. A new
// content check refuses (a bad edit of the ConfigMap) is logged and the
// agent goes on with the configuration it runs, rather than exit into a
// crash loop on every node at once. Folders are watched, not the file: a
// ConfigMap volume replaces the file by swapping a symlink (..data) beside
// it, which a watch on the file itself reports as the old file's removal,
// not as the write or rename kube-proxy's watch exits on.
func watchConfig(ctx context.Context, path string, loaded []byte, check func() error, log *zap.Logger) error {
	fw := watchFolders(path, log)
	defer fw.close()
	tick := time.NewTicker(configRecheck)
	defer tick.Stop()
	settle := time.NewTimer(0)
	<-settle.C
	refused := loaded // the last content refused, logged once
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fw.errors():
			log.Warn("watch the config file", zap.String("config", path), zap.Error(err))
			continue
		case <-fw.events():
			fw.follow()
			settle.Reset(configSettle) // read once the writing is done
			continue
		case <-settle.C:
		case <-tick.C:
		}
		data, err := os.ReadFile(path)
		if err != nil || bytes.Equal(data, loaded) || bytes.Equal(data, refused) {
			continue // mid-swap, or unchanged: a ConfigMap resync touches the folder too
		}
		if err := check(); err != nil {
			log.Error("the config file changed but is refused; running on with the configuration read at start",
				zap.String("config", path), zap.Error(err))
			refused = data
			continue
		}
		return errConfigChanged
	}
}

// folderWatch reports the events of the config file's folder and of the
// folder its symlinks lead to (written in place there, the file changes
// without an event beside the link). Without inotify (its limits reached)
// it reports none, and the periodic read alone finds a change.
type folderWatch struct {
	w    *fsnotify.Watcher
	path string
}

func watchFolders(path string, log *zap.Logger) folderWatch {
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(filepath.Dir(path)); err == nil {
			fw := folderWatch{w, path}
			fw.follow()
			return fw
		}
		_ = w.Close()
	}
	log.Warn("cannot watch the config file; reading it every minute instead", zap.String("config", path), zap.Error(err))
	return folderWatch{path: path}
}

// follow adds the folder the file's symlinks lead to now: after a
// ConfigMap update, a new one.
func (fw folderWatch) follow() {
	if real, err := filepath.EvalSymlinks(fw.path); err == nil && fw.w != nil {
		_ = fw.w.Add(filepath.Dir(real))
	}
}

func (fw folderWatch) events() <-chan fsnotify.Event {
	if fw.w == nil {
		return nil
	}
	return fw.w.Events
}

func (fw folderWatch) errors() <-chan error {
	if fw.w == nil {
		return nil
	}
	return fw.w.Errors
}

func (fw folderWatch) close() {
	if fw.w != nil {
		_ = fw.w.Close()
	}
}
