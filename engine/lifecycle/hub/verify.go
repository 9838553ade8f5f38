package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lilyformac/lily/internal/fsutil"
)

// Marker is the content of MarkerName: what a completed pull verified.
type Marker struct {
	Repo        string    `json:"repo"`
	Revision    string    `json:"revision"`
	Files       []File    `json:"files"`
	CompletedAt time.Time `json:"completed_at"`
}

// Size is the total size of the marked files.
func (m *Marker) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

var (
	// ErrNotPulled: the directory has no completion marker (never pulled, or the pull did not finish).
	ErrNotPulled = errors.New("no completed pull")
	// ErrMismatch: a file's size or checksum differs from what the Hub listed.
	ErrMismatch = errors.New("verification failed")
)

// ReadMarker reads dir's completion marker.
func ReadMarker(dir string) (*Marker, error) {
	raw, err := readNoFollow(filepath.Join(dir, MarkerName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNotPulled)
	}
	if err != nil {
		return nil, err
	}
	var m Marker
	if err := json.Unmarshal(raw, &m); err != nil || m.Repo == "" || len(m.Files) == 0 {
		return nil, fmt.Errorf("%s: unreadable %s: %w", dir, MarkerName, ErrNotPulled)
	}
	for _, f := range m.Files {
		if err := checkPath(f.Path); err != nil {
			return nil, fmt.Errorf("%s: %s lists %q (%v): %w", dir, MarkerName, f.Path, err, ErrNotPulled)
		}
	}
	return &m, nil
}

func writeMarker(dir string, m *Marker) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, MarkerName), append(raw, '\n'), 0o644)
}

// VerifyMode selects how thoroughly Verify checks files.
type VerifyMode int

const (
	VerifyFast VerifyMode = iota // sizes only: a stat per file
	VerifyFull                   // sizes and checksums: reads every byte
)

// Verify checks dir against its completion marker and returns the marker. On a mismatch it
// also removes the marker, since the directory is provably not a complete copy: the next Pull
// then re-checks every file and downloads only the damaged or missing ones. A symlink on the
// way to a file (or at the marker's name) fails with ErrSymlink, as in Pull, whatever it points
// to. progress, if not nil, is called while hashing in full mode.
func Verify(ctx context.Context, dir string, mode VerifyMode, progress func(Progress)) (*Marker, error) {
	m, err := ReadMarker(dir)
	if err != nil {
		return nil, err
	}
	tr := &tracker{total: m.Size(), files: len(m.Files)}
	if mode == VerifyFull {
		defer reportEvery(250*time.Millisecond, progress, tr)()
	}
	for _, f := range m.Files {
		err = checkOne(ctx, dir, f, mode, func(n int64) { tr.add(n, f.Path) })
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			os.Remove(filepath.Join(dir, MarkerName))
			return nil, fmt.Errorf("%s (%s@%s): %w", dir, m.Repo, m.Revision, err)
		}
		tr.fileDone(f.Path)
	}
	return m, nil
}

// checkOne checks dir's copy of f: its size, and in VerifyFull mode its checksum.
func checkOne(ctx context.Context, dir string, f File, mode VerifyMode, count func(int64)) error {
	if err := refuseLinks(dir, f.Path); err != nil {
		return err
	}
	path := filepath.Join(dir, filepath.FromSlash(f.Path))
	if mode == VerifyFull {
		return checkFile(ctx, path, f, count)
	}
	return checkSize(path, f)
}

// checkSize checks that path is a regular file of f's size; a symlink there is not followed.
func checkSize(path string, f File) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return statError(err, f)
	}
	return checkStat(fi, path, f)
}

func statError(err error, f File) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s is missing: %w", f.Path, ErrMismatch)
	}
	return err
}

func checkStat(fi fs.FileInfo, path string, f File) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return linkError(path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file: %w", f.Path, ErrMismatch)
	case fi.Size() != f.Size:
		return fmt.Errorf("%s: size %d, want %d: %w", f.Path, fi.Size(), f.Size, ErrMismatch)
	}
	return nil
}

// checkFile verifies path's size and checksum against f: sha256 for LFS files, and for files
// kept in git the blob id sha1("blob <size>\x00" + content). Neither the check nor the open
// follows a symlink, and the file opened is checked again, so what is hashed is what was checked.
func checkFile(ctx context.Context, path string, f File, count func(int64)) error {
	if err := checkSize(path, f); err != nil {
		return err
	}
	fh, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return statError(err, f)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if err := checkStat(fi, path, f); err != nil {
		return err
	}
	var h hash.Hash
	kind, want := "sha256", f.SHA256
	if want != "" {
		h = sha256.New()
	} else {
		kind, want = "git blob sha1", f.GitSHA1
		h = sha1.New()
		fmt.Fprintf(h, "blob %d\x00", f.Size)
	}
	if _, err := io.Copy(h, &ctxReader{ctx: ctx, r: fh, count: count}); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(want) {
		return fmt.Errorf("%s: %s is %s, the Hub lists %s: %w", f.Path, kind, got, want, ErrMismatch)
	}
	return nil
}

// ctxReader stops a long hash when ctx ends and reports bytes read.
type ctxReader struct {
	ctx   context.Context
	r     io.Reader
	count func(int64)
}

func (r *ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(p)
	if r.count != nil && n > 0 {
		r.count(int64(n))
	}
	return n, err
}
