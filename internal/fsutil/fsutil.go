// Package fsutil holds the small file-system helpers Lily's packages share: crash-safe writes and
// free-space queries.
package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrUnsupported is returned by FreeSpace where the platform has no statfs binding here.
var ErrUnsupported = errors.New("free space: unsupported on this platform")

// SyncDir fsyncs a directory so that a rename or create inside it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// WriteFileAtomic replaces path with data: it writes a temporary file next to it, fsyncs it,
// renames it over path and fsyncs the directory, so readers see either the old or the new file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(dir)
}

// FreeSpace returns the bytes available to an unprivileged user on the file system holding
// path. A path that does not exist yet is answered for its nearest existing ancestor, so the
// space can be checked before the model directory is created.
func FreeSpace(path string) (uint64, error) {
	p := filepath.Clean(path)
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			return 0, fmt.Errorf("free space of %s: no existing parent directory", path)
		}
		p = parent
	}
	return freeSpace(p)
}
