package hub

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrSymlink: a symlink inside the model directory. Lily refuses one rather than following it
// (a planted link would make it write, or trust, a file outside the directory) or replacing
// it (it may be someone's deliberate setup, say a shard kept on another disk, and replacing
// it would silently cost a multi-GB download). The model directory itself may be a link.
var ErrSymlink = errors.New("refusing a symlink inside the model directory")

// checkPath returns why p, a path from a listing or a marker, is not a clean slash-separated
// path of a file strictly inside the model directory, or nil. Lily's own names are refused
// too: a listed ".lily-complete.json" would overwrite the marker, a listed "x.part" the
// partial download of x. Those names are matched ignoring case, as macOS file systems do.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case strings.ContainsAny(p, "\\\x00"):
		return errors.New("backslash or NUL in the path")
	case strings.HasPrefix(p, "/") || filepath.IsAbs(filepath.FromSlash(p)):
		return errors.New("absolute path")
	}
	for _, seg := range strings.Split(p, "/") {
		lower := strings.ToLower(seg)
		switch {
		case seg == "":
			return errors.New("empty path component")
		case seg == "." || seg == "..":
			return fmt.Errorf("%q component", seg)
		case strings.HasPrefix(lower, ".lily-"), strings.HasSuffix(lower, PartSuffix), strings.HasSuffix(lower, SideSuffix):
			return fmt.Errorf("%q is a name Lily keeps for itself (.lily-*, *%s, *%s)", seg, PartSuffix, SideSuffix)
		}
	}
	if !filepath.IsLocal(filepath.FromSlash(p)) { // e.g. a reserved name on Windows
		return errors.New("not a local path")
	}
	return nil
}

// refuseLinks returns an ErrSymlink error if a component of any of rels (slash-separated,
// relative to dir, the last component included) is a symlink. A missing component ends the
// walk: nothing exists below it.
func refuseLinks(dir string, rels ...string) error {
	for _, rel := range rels {
		p := dir
		for _, seg := range strings.Split(rel, "/") {
			p = filepath.Join(p, seg)
			fi, err := os.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err != nil {
				return err
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return linkError(p)
			}
		}
	}
	return nil
}

func linkError(p string) error {
	target, _ := os.Readlink(p)
	return fmt.Errorf("%w: %s is a symlink (to %s); Lily neither follows nor replaces links there: remove it, or put the real file or directory in its place, and pull again", ErrSymlink, p, target)
}

// openNoFollow opens path without following a symlink at its last component. refuseLinks
// runs first; this covers a link planted at that component since. (A directory swapped for a
// link in between is not covered: os.Root-relative opens would be the next step.)
func openNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|oNoFollow, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, linkError(path)
	}
	return f, err
}

func readNoFollow(path string) ([]byte, error) {
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
