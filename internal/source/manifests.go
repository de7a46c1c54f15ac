package source

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-ipvs/kube-ipvs/internal/model"
	"github.com/kube-ipvs/kube-ipvs/internal/objects"
)

// Defaults for the folder watch.
const (
	DefaultRescan   = 5 * time.Second
	DefaultDebounce = 100 * time.Millisecond
)

// Manifests reads every *.yaml, *.yml and *.json file in Dir (several YAML
// documents per file and v1 List objects are allowed) holding Service,
// EndpointSlice and Node objects, and keeps the Store equal to them.
//
// Only regular files (or symlinks to them) of at most MaxManifestBytes are
// read. A file that is not one, or cannot be split into documents, is
// reported (Log and Problems) and its last good content stays in force.
// Otherwise each object stands on its own, as with kubectl apply -f: one
// that does not decode or validate is reported with its file, document and
// field, and keeps its last good version (none if it never had one), while
// the file's other objects are served. A removed file removes its objects;
// an object removed from a file goes once the file reads whole. An object defined in two
// files is taken from the first file by name and reported on the later one.
// Only objects that really changed reach the Store, so rewriting a file with
// the same content marks nothing dirty.
//
// This node's Node is the Node named NodeName; when there is none, and the
// folder holds exactly one Node, that one (so the demo folder works on any
// host name). Otherwise there is no Node.
type Manifests struct {
	Dir      string
	NodeName string
	Store    *objects.Store
	Log      *zap.Logger
	Problems func(p Problem) // optional; called for every problem reported
	// NodePortRange is the agent's --nodeport-range: a nodePort or
	// healthCheckNodePort outside it is refused, as the API server's
	// allocator would. Zero: any port 1-65535.
	NodePortRange model.PortRange

	Rescan   time.Duration // safety-net full rescan while running; 0: DefaultRescan
	Debounce time.Duration // quiet time after a change before reading; 0: DefaultDebounce

	mu      sync.Mutex
	files   map[string]*fileState // by base name
	applied map[objKey]runtime.Object
	node    *corev1.Node // the Node put in the store; nil for none
	// nodeNames are the Nodes whose addresses are in the store.
	nodeNames map[string]struct{}
	reported  map[string]bool // duplicate-object problems already reported
}

// fileState remembers, per file, the bytes last read (to skip unchanged
// files and not report the same problem on every rescan) and the last
// content that was good.
type fileState struct {
	raw     []byte
	good    []object
	readErr string // the last read error reported, "" when the last read worked
}

// Load reads the whole folder once, applies it to the Store and marks the
// "manifests" source synced. It returns the problems found, joined; the good
// files are applied all the same. An unreadable folder changes nothing.
func (m *Manifests) Load() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	problems, err := m.scanLocked(true)
	if err != nil {
		return err
	}
	m.Store.SetSynced(SourceManifests)
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// Run loads the folder and then follows changes to it until ctx ends. File
// events are debounced (editors write in bursts); a periodic rescan covers
// events the watch misses (a folder replaced, a network file system).
func (m *Manifests) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch manifest folder %s: %w", m.Dir, err)
	}
	defer w.Close()
	// Watch before the first read, so no change falls between the two.
	if err := w.Add(m.Dir); err != nil {
		return fmt.Errorf("watch manifest folder %s: %w", m.Dir, err)
	}
	if err := m.Load(); err != nil && !isProblems(err) {
		return err
	}
	rescan := time.NewTicker(cmp.Or(m.Rescan, DefaultRescan))
	defer rescan.Stop()
	// Armed by the first change. Since Go 1.23 a stopped timer delivers
	// nothing, so there is no channel to drain.
	debounce := time.NewTimer(0)
	debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("watch manifest folder %s: watcher closed", m.Dir)
			}
			debounce.Reset(cmp.Or(m.Debounce, DefaultDebounce))
		case err, ok := <-w.Errors:
			if ok {
				// An overflow loses events: the next rescan repairs it.
				m.log().Warn("manifest folder watch error", zap.String("dir", m.Dir), zap.Error(err))
			}
		case <-debounce.C:
			m.rescan(w)
		case <-rescan.C:
			m.rescan(w)
		}
	}
}

func (m *Manifests) rescan(w *fsnotify.Watcher) {
	// A folder deleted and made again loses its watch; take it up again.
	if len(w.WatchList()) == 0 {
		_ = w.Add(m.Dir)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.scanLocked(false); err != nil {
		// Never prune on a doubtful read: keep everything as it is.
		m.log().Error("read manifest folder", zap.String("dir", m.Dir), zap.Error(err))
	}
}

func isProblems(err error) bool {
	var p Problem
	return errors.As(err, &p)
}

func (m *Manifests) log() *zap.Logger {
	if m.Log == nil {
		return zap.NewNop()
	}
	return m.Log
}

// scanLocked reads the folder, updates the per-file state, merges all files
// and applies the difference to the Store. full re-reads and re-reports
// everything; otherwise unchanged files are skipped and only new problems
// are reported. It returns the problems it reported.
func (m *Manifests) scanLocked(full bool) ([]Problem, error) {
	if m.files == nil {
		m.files = map[string]*fileState{}
		m.applied = map[objKey]runtime.Object{}
		m.reported = map[string]bool{}
	}
	names, err := listManifests(m.Dir)
	if err != nil {
		return nil, err
	}
	var problems []Problem
	for _, name := range names {
		problems = append(problems, m.readFile(name, full)...)
	}
	listed := make(map[string]bool, len(names))
	for _, name := range names {
		listed[name] = true
	}
	for name := range m.files {
		if !listed[name] { // a set: a list search per file would make a rescan quadratic in the files
			delete(m.files, name)
		}
	}
	desired, dups := m.merge(names)
	problems = append(problems, m.newDuplicates(dups, full)...)
	m.apply(desired)
	m.applyNode(desired)
	for _, p := range problems {
		m.report(p)
	}
	return problems, nil
}

// listManifests returns the sorted base names of the manifest files in dir.
// Hidden files are skipped: editors keep swap and backup files there.
func listManifests(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read manifest folder %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !hasManifestExt(name) {
			continue
		}
		// Follow symlinks (a mounted ConfigMap links every key into ..data).
		// Other non-regular files are listed, so that reading them reports
		// them and their last good content stays.
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.IsDir() {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

func hasManifestExt(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// readFile re-reads one file and updates its state; a bad file keeps its
// last good content.
func (m *Manifests) readFile(name string, full bool) []Problem {
	path := filepath.Join(m.Dir, name)
	st := m.files[name]
	if st == nil {
		st = &fileState{}
		m.files[name] = st
	}
	data, err := readManifest(path)
	if errors.Is(err, fs.ErrNotExist) {
		delete(m.files, name) // gone since the listing: removed
		return nil
	}
	if err != nil {
		// Reported once, not on every rescan, like a file that does not parse.
		repeat := !full && st.readErr == err.Error()
		st.readErr = err.Error()
		if repeat {
			return nil
		}
		return []Problem{{File: path, Err: fmt.Errorf("read: %w", err)}}
	}
	st.readErr = ""
	if !full && st.raw != nil && bytes.Equal(st.raw, data) {
		return nil
	}
	st.raw = data
	reads, whole := readDocuments(path, data, rules{nodePorts: m.NodePortRange})
	if whole != nil {
		return []Problem{*whole}
	}
	var problems []Problem
	st.good, problems = keepLastGood(st.good, reads)
	return problems
}

// keepLastGood is what a file serves after a read, and the problems of
// the read: every object that read well; every refused object at its last
// good version, as kubectl apply -f leaves a live object as it was when its
// new version is refused (none on a first read); and, when some document
// named no object (a YAML error, a lost name or kind), every other object
// of the last good content too, since its removal cannot be told from its
// breakage: a removal takes effect once the file reads whole. A last good
// version is marked stale and stands in only for a key no document reads
// well for: here, wherever in the file the good document is; across
// files, merge sees to it.
func keepLastGood(last []object, reads []read) ([]object, []Problem) {
	lastByKey := make(map[objKey]object, len(last))
	for _, o := range last {
		if _, dup := lastByKey[o.key]; !dup { // the first is the one served
			lastByKey[o.key] = o
		}
	}
	seen := map[objKey]bool{}
	whole := true
	for _, rd := range reads {
		if rd.problem == nil {
			seen[rd.key] = true
		}
		whole = whole && !rd.unknown
	}
	var good []object
	var problems []Problem
	for _, rd := range reads {
		if rd.problem == nil {
			good = append(good, rd.object)
			continue
		}
		p := *rd.problem
		if o, ok := lastByKey[rd.key]; ok && !rd.unknown && !seen[rd.key] {
			o.doc, o.stale = rd.doc, true
			good = append(good, o)
			seen[rd.key] = true
			p.Kept = true
		}
		problems = append(problems, p)
	}
	if !whole {
		for _, o := range last {
			if !seen[o.key] {
				o.stale = true
				good = append(good, o)
				seen[o.key] = true
			}
		}
	}
	return good, problems
}

// placed is where an object of the merged view came from.
type placed struct {
	object
	file string
}

// merge builds the folder's view: every object of every file, first file
// (by name) and first document wins, an object that read well before any
// stale one (keepLastGood). names is the sorted list of files.
func (m *Manifests) merge(names []string) (map[objKey]placed, []Problem) {
	desired := map[objKey]placed{}
	var dups []Problem
	fresh := map[objKey]bool{}
	for _, stale := range []bool{false, true} {
		for _, name := range names {
			st := m.files[name]
			if st == nil {
				continue
			}
			path := filepath.Join(m.Dir, name)
			for _, o := range st.good {
				if o.stale != stale || (stale && fresh[o.key]) {
					continue // a stale version gives way to a good read
				}
				if first, ok := desired[o.key]; ok {
					dups = append(dups, Problem{File: path, Doc: o.doc, Object: o.key.String(),
						Err: fmt.Errorf("already defined in %s document %d; this one is ignored", first.file, first.doc)})
					continue
				}
				desired[o.key] = placed{o, path}
				fresh[o.key] = !stale
			}
		}
	}
	return desired, dups
}

// newDuplicates keeps the duplicates that were not reported last time (all
// of them when full), and remembers the current set.
func (m *Manifests) newDuplicates(dups []Problem, full bool) []Problem {
	now := map[string]bool{}
	var fresh []Problem
	for _, p := range dups {
		s := p.Error()
		now[s] = true
		if full || !m.reported[s] {
			fresh = append(fresh, p)
		}
	}
	m.reported = now
	return fresh
}

// apply puts into the Store the Services and EndpointSlices that differ
// from what it holds, and deletes the ones that went away.
// They go in as one Store edit: a sync sees the folder's change whole, never
// a file's EndpointSlice without the Service beside it.
func (m *Manifests) apply(desired map[objKey]placed) {
	m.Store.Edit(func(e objects.Edit) { m.applyIn(e, desired) })
}

func (m *Manifests) applyIn(e objects.Edit, desired map[objKey]placed) {
	for key := range m.applied {
		if _, ok := desired[key]; !ok {
			deleteObject(e, key)
			delete(m.applied, key)
		}
	}
	for key, p := range desired {
		if key.kind == "Node" {
			continue // handled by applyNode: only one Node is ours
		}
		// An unchanged file keeps its objects: the same pointer needs no
		// deep comparison (reflection over 20,000 objects every rescan).
		if old, ok := m.applied[key]; ok && (old == p.obj || equality.Semantic.DeepEqual(old, p.obj)) {
			continue
		}
		switch o := p.obj.(type) {
		case *corev1.Service:
			e.SetService(o)
		case *discoveryv1.EndpointSlice:
			e.SetSlice(o)
		}
		m.applied[key] = p.obj
	}
}

func deleteObject(e objects.Edit, key objKey) {
	switch key.kind {
	case "Service":
		e.DeleteService(model.ServiceName{Namespace: key.namespace, Name: key.name})
	case "EndpointSlice":
		e.DeleteSlice(key.namespace, key.name)
	}
}

// applyNode picks this node's Node from the folder and puts it in the Store
// when it changed, with every Node's addresses (which no Service may claim).
func (m *Manifests) applyNode(desired map[objKey]placed) {
	var nodes []*corev1.Node
	names := map[string]struct{}{}
	for key, p := range desired {
		if key.kind == "Node" {
			n := p.obj.(*corev1.Node)
			nodes = append(nodes, n)
			names[n.Name] = struct{}{}
			m.Store.SetNodeAddrs(n.Name, objects.AddrsOf(n)) // the same again changes nothing
		}
	}
	for name := range m.nodeNames {
		if _, ok := names[name]; !ok {
			m.Store.DeleteNodeAddrs(name)
		}
	}
	m.nodeNames = names
	var chosen *corev1.Node
	if p, ok := desired[objKey{kind: "Node", name: m.NodeName}]; ok && m.NodeName != "" {
		chosen = p.obj.(*corev1.Node)
	} else if len(nodes) == 1 {
		chosen = nodes[0]
	}
	if (chosen == nil && m.node == nil) || (chosen != nil && m.node != nil && equality.Semantic.DeepEqual(m.node, chosen)) {
		return
	}
	if nodeName(chosen) != nodeName(m.node) {
		m.log().Info("manifest node chosen", zap.String("node", nodeName(chosen)),
			zap.String("nodeName", m.NodeName), zap.Int("nodes", len(nodes)))
	}
	m.node = chosen
	m.Store.SetNode(chosen)
}

func (m *Manifests) report(p Problem) {
	m.log().Error("manifest problem", zap.String("file", p.File), zap.Int("doc", p.Doc),
		zap.String("object", cut(p.Object)), zap.Bool("lastGoodKept", p.Kept), zap.Error(p.Err))
	if m.Problems != nil {
		m.Problems(p)
	}
}

func nodeName(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	return n.Name
}
