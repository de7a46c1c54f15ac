package source

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxManifestBytes caps one manifest file. The API server refuses request
// bodies over 3 MiB, so any object a cluster could hold fits with room for
// a few more in the same file; a demo folder's files are a few KiB. The cap
// bounds what one file costs (its bytes are kept to skip unchanged files,
// and decoding YAML takes several times its size) and stops a file that
// never ends (a symlink to /dev/zero) from exhausting the agent.
const MaxManifestBytes = 8 << 20

// errNotRegular marks a manifest name that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// readManifest reads a manifest file: a regular file, or a symlink to one
// (a mounted ConfigMap links every key into ..data), of at most
// MaxManifestBytes.
//
// The type is checked before opening, because opening is not harmless:
// opening a FIFO for reading waits for a writer (the loader would hang),
// and opening some devices acts (a watchdog starts counting). The file is
// then opened non-blocking and checked again on the open descriptor, so a
// name swapped in between is refused too, before a byte is read.
func readManifest(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := checkManifestInfo(info); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkManifestInfo(opened); err != nil {
		return nil, err
	}
	if !os.SameFile(info, opened) {
		return nil, errors.New("replaced while being opened; read again on the next scan")
	}
	// Read one byte past the cap: a file that grew since the Stat is
	// caught without reading all of it.
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("grew past the %d bytes a manifest file may have while being read", MaxManifestBytes)
	}
	return data, nil
}

func checkManifestInfo(info os.FileInfo) error {
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%w (%s)", errNotRegular, fileType(info.Mode()))
	}
	if info.Size() > MaxManifestBytes {
		return fmt.Errorf("%d bytes, over the %d a manifest file may have", info.Size(), MaxManifestBytes)
	}
	return nil
}

// fileType names a non-regular file's type for the report.
func fileType(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}
