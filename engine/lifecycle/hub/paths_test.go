package hub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/lifecycle/hub/hubtest"
)

// guardListing answers every listing request after the first n with a 400, so that a client
// that loops fails within n requests instead of hanging the test. It returns the request count.
func guardListing(h *hubtest.Hub, n int32) *atomic.Int32 {
	var calls atomic.Int32
	prev := h.Fault
	h.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Kind == "tree" && calls.Add(1) > n {
			http.Error(w, "test guard: too many listing requests", http.StatusBadRequest)
			return true
		}
		return prev != nil && prev(c, w, r)
	}
	return &calls
}

// pullWithin is h.pull with a deadline, for tests of loops.
func (h *harness) pullWithin(c *Client, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := c.Pull(ctx, repo, rev, h.dir)
	return err
}

// contents maps every path under dir to its content's sha256 ("<dir>" for directories,
// "-> target" for links), so a test can assert that nothing there changed.
func contents(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[p] = "-> " + target
		case d.IsDir():
			m[p] = "<dir>"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[p] = hubtest.SHA256(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestListRefusesUnsafeEntries(t *testing.T) {
	for _, tc := range []struct{ typ, path string }{
		// "." and "sub/.." pass filepath.IsLocal: as files they made Lily write <dir>.part.
		{"file", "."}, {"file", "sub/.."}, {"file", "a/../b"}, {"file", "a//b"}, {"file", "sub/"},
		{"file", ".."}, {"file", ""}, {"file", "/etc/x"}, {"file", `a\b`},
		// Lily's own names: the marker, the lock, a partial download and its sidecar.
		{"file", MarkerName}, {"file", ".LILY-pull.lock"}, {"file", "x.part"}, {"file", "x.part.json"}, {"file", "sub.part/y"},
		// Not an entry of the directory listed (the root): it would dodge the checks on sub.
		{"file", "sub/y"},
		{"directory", "."}, {"directory", "sub/.."}, {"directory", ""}, {"directory", "x.part"},
	} {
		t.Run(tc.typ+" "+strings.ReplaceAll(tc.path, "/", "∕"), func(t *testing.T) {
			h := newHarness(t)
			h.hub.Tree = func(dir string, es []hubtest.Entry) []hubtest.Entry {
				if dir != "" {
					return es
				}
				return append(es, hubtest.Entry{Type: tc.typ, Path: tc.path, Size: 1, OID: hubtest.GitSHA1([]byte("x"))})
			}
			guardListing(h.hub, 50) // a directory "." would re-list the root forever
			parent := filepath.Dir(h.dir)
			err := h.pullWithin(h.client(), 10*time.Second)
			if ents, _ := os.ReadDir(parent); len(ents) != 1 || ents[0].Name() != "model" {
				t.Errorf("the model directory's parent now holds %v", ents)
			}
			if err == nil || !strings.Contains(err.Error(), "refusing") || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.path)) {
				t.Fatalf("err = %v, want a refusal naming %q", err, tc.path)
			}
			for _, c := range h.hub.Calls() {
				if c.Kind == "file" {
					t.Fatalf("downloaded %s before the whole listing was checked", c.File)
				}
			}
		})
	}
}

// Lily refuses a symlink planted in the model directory rather than following or replacing
// it: the pull fails naming the link, the link stays, and what it points to is untouched.
func TestPullRefusesPlantedSymlinks(t *testing.T) {
	for _, link := range []string{"config.json", shard + PartSuffix, shard + SideSuffix, "sub", "sub/deeper", MarkerName, LockName} {
		t.Run(strings.ReplaceAll(link, "/", "∕"), func(t *testing.T) {
			h := newHarness(t)
			outside := t.TempDir()
			target := filepath.Join(outside, "victim")
			os.WriteFile(target, []byte("keep me"), 0o644)
			if path.Base(link) == "sub" || path.Base(link) == "deeper" {
				target = outside // a directory: files pulled "into" it would land outside
			}
			os.MkdirAll(filepath.Dir(filepath.Join(h.dir, link)), 0o755)
			if err := os.Symlink(target, filepath.Join(h.dir, link)); err != nil {
				t.Fatal(err)
			}
			before := contents(t, outside)
			_, err := h.pull(h.client())
			if after := contents(t, outside); !maps.Equal(before, after) {
				t.Errorf("outside the model directory:\nbefore %q\nafter  %q", before, after)
			}
			if err == nil || !strings.Contains(err.Error(), "is a symlink") || !strings.Contains(err.Error(), filepath.Join(h.dir, link)) {
				t.Fatalf("err = %v, want a refusal naming the link", err)
			}
			if fi, err := os.Lstat(filepath.Join(h.dir, link)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Fatalf("the link was replaced: %v, %v", fi, err)
			}
			if _, err := ReadMarker(h.dir); err == nil {
				t.Fatal("a marker was written")
			}
		})
	}
}

// A link planted after a complete pull, even to a copy with the right content, fails
// verification (which drops the marker) and the next pull names it.
func TestVerifyRefusesSymlinkedFile(t *testing.T) {
	for _, link := range []string{"sub/extra.json", "sub/deeper", MarkerName} {
		t.Run(strings.ReplaceAll(link, "/", "∕"), func(t *testing.T) {
			h := newHarness(t)
			if _, err := h.pull(h.client()); err != nil {
				t.Fatal(err)
			}
			at := filepath.Join(h.dir, filepath.FromSlash(link))
			moved := filepath.Join(t.TempDir(), "moved")
			if err := os.Rename(at, moved); err != nil {
				t.Fatal(err)
			}
			os.Symlink(moved, at)
			if _, err := Verify(context.Background(), h.dir, VerifyFull, nil); !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), at+" is a symlink") {
				t.Fatalf("verify: %v", err)
			}
			if _, err := h.pull(h.client()); !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), at+" is a symlink") {
				t.Fatalf("pull: %v", err)
			}
		})
	}
}

// openPartFile does not follow a link planted after the checks that precede it.
func TestOpenPartFileDoesNotFollowLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "victim")
	os.WriteFile(target, []byte("keep me"), 0o644)
	os.Symlink(target, filepath.Join(dir, "x.part"))
	if f, err := openPartFile(filepath.Join(dir, "x.part"), true); !errors.Is(err, ErrSymlink) {
		t.Fatalf("opened %v, err %v", f, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me" {
		t.Fatalf("the link's target now holds %q", b)
	}
}

// The model directory itself may be a link (a models folder on another disk): only what is
// inside it is refused.
func TestPullIntoLinkedModelDir(t *testing.T) {
	h := newHarness(t)
	real := t.TempDir()
	if err := os.Symlink(real, h.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pull(h.client()); err != nil {
		t.Fatal(err)
	}
	h.checkComplete()
}

func TestListStopsPaginationLoops(t *testing.T) {
	for _, tc := range []struct {
		name  string
		next  func(self string) string // the Link rel="next" of the page at self
		calls int32
	}{
		{"next is the page itself", func(self string) string { return self }, 1},
		{"two pages point at each other", func(self string) string {
			if first, ok := strings.CutSuffix(self, "?cursor=1"); ok {
				return first
			}
			return self + "?cursor=1"
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
				if c.Kind != "tree" {
					return false
				}
				w.Header().Set("Link", fmt.Sprintf(`<%s>; rel="next"`, tc.next(h.hub.URL()+r.URL.RequestURI())))
				fmt.Fprint(w, `[]`)
				return true
			}
			calls := guardListing(h.hub, 50)
			err := h.pullWithin(h.client(), 10*time.Second)
			if err == nil || !strings.Contains(err.Error(), "the listing loops") || !strings.Contains(err.Error(), "leads back to") {
				t.Fatalf("err = %v", err)
			}
			if calls.Load() != tc.calls {
				t.Fatalf("%d listing requests, want %d", calls.Load(), tc.calls)
			}
		})
	}
}

func TestListStopsRecursionLoops(t *testing.T) {
	for _, tc := range []struct {
		name string
		tree func(dir string, es []hubtest.Entry) []hubtest.Entry
		want string
	}{
		{"a directory lists itself", func(dir string, es []hubtest.Entry) []hubtest.Entry {
			if dir == "sub" {
				es = append(es, hubtest.Entry{Type: "directory", Path: "sub"})
			}
			return es
		}, `refusing "sub" from the Hub listing of sub/: a directory inside itself`},
		{"a directory is listed twice", func(dir string, es []hubtest.Entry) []hubtest.Entry {
			if dir == "" {
				es = append(es, hubtest.Entry{Type: "directory", Path: "sub"})
			}
			return es
		}, `refusing "sub" from the Hub listing: listed twice`},
		{"directories nest without end", func(dir string, es []hubtest.Entry) []hubtest.Entry {
			if dir == "" || strings.HasPrefix(dir, "d") {
				es = append(es, hubtest.Entry{Type: "directory", Path: path.Join(dir, "d")})
			}
			return es
		}, "nested 33 levels deep, more than the 32 Lily follows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.hub.Tree = tc.tree
			calls := guardListing(h.hub, 60)
			err := h.pullWithin(h.client(), 10*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if n := calls.Load(); n > 40 {
				t.Fatalf("%d listing requests before the loop was noticed", n)
			}
		})
	}
}

// A server that pages without end, every page a new URL, is stopped by the page cap.
func TestListStopsAtThePageCap(t *testing.T) {
	h := newHarness(t)
	var cursor atomic.Int32
	h.hub.Fault = func(c hubtest.Call, w http.ResponseWriter, r *http.Request) bool {
		if c.Kind != "tree" {
			return false
		}
		w.Header().Set("Link", fmt.Sprintf(`<%s%s?cursor=%d>; rel="next"`, h.hub.URL(), r.URL.Path, cursor.Add(1)))
		fmt.Fprint(w, `[]`)
		return true
	}
	calls := guardListing(h.hub, 50)
	c := h.client()
	c.ListPages = 10
	err := h.pullWithin(c, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "the listing did not end after 10 pages") {
		t.Fatalf("err = %v", err)
	}
	if calls.Load() != 10 {
		t.Fatalf("%d listing requests, want 10", calls.Load())
	}
	if New().ListPages != 1000 {
		t.Fatalf("default page cap %d", New().ListPages)
	}
}
