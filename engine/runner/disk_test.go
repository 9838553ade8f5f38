package runner

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/prefixcache"
	"github.com/lilyformac/lily/engine/sample"
)

// The disk tier's file names: a snapshot's suffix, a half-written file's prefix.
const snapSuffix, tmpPrefix = ".snap", ".tmp-"

var testIdentity = prefixcache.Identity{Model: "org/tiny-a@v1", Config: "c0ffee", Backend: "cpu"}

func openDisk(t *testing.T, dir string, budget int64, id prefixcache.Identity) *prefixcache.Disk {
	t.Helper()
	d, err := prefixcache.OpenDisk(dir, budget, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func snapFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*"+snapSuffix))
	return m
}

// TestDiskSurvivesRestart: a checkpoint saved by one runner is on disk; a new runner (a new
// process: new backend, empty memory) over the same directory restores it for a prompt that
// shares it, to the token, with the output of a run without any cache.
func TestDiskSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	seed := uint64(9)
	params := sample.Params{Temperature: 0.8, TopK: 20, Seed: &seed}
	p1 := prompt(50, 1)
	first := New(tinyBackend(t), Options{CacheBytes: 1 << 30, Disk: openDisk(t, dir, 1<<30, testIdentity), CheckpointEvery: -1})
	collect(t, first, Request{Prompt: p1, MaxTokens: 4, Sampling: params, Checkpoints: []int{40}})
	first.disk.Flush()
	if st := first.disk.Stats(); st.Writes != 2 || len(snapFiles(t, dir)) != 2 { // the checkpoint and the generation's end
		t.Fatalf("disk %+v, files %v", st, snapFiles(t, dir))
	}

	m := tinyBackend(t)
	second := New(m, Options{CacheBytes: 1 << 30, Disk: openDisk(t, dir, 1<<30, testIdentity), CheckpointEvery: -1})
	p2 := append(slices.Clone(p1[:40]), prompt(12, 5)...)
	req := Request{Prompt: p2, MaxTokens: 6, Sampling: params}
	want, _ := collect(t, New(m, Options{}), req)
	got, res := collect(t, second, req)
	if res.CachedTokens != 40 || !slices.Equal(got, want) || second.disk.Stats().Loads != 1 {
		t.Fatalf("after restart: cached %d, %v (want 40, %v), disk %+v", res.CachedTokens, got, want, second.disk.Stats())
	}
	// Loaded once, the state is in memory for the next request.
	if _, res := collect(t, second, req); res.CachedTokens != len(p2) || second.disk.Stats().Loads != 1 {
		t.Fatalf("repeat: cached %d, disk %+v", res.CachedTokens, second.disk.Stats())
	}
}

// TestDiskRefusesBadFiles: a corrupted file fails its checksum and is deleted, not loaded (the
// prompt is prefilled, correctly); files of another model or backend, truncated files and
// half-written temporaries are deleted when the directory is opened.
func TestDiskRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	m := tinyBackend(t)
	r := New(m, Options{Disk: openDisk(t, dir, 1<<30, testIdentity), CheckpointEvery: -1})
	p := prompt(30, 2)
	collect(t, r, Request{Prompt: p, MaxTokens: 1, Checkpoints: []int{20}})
	r.disk.Flush()
	files := snapFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	raw, _ := os.ReadFile(files[0])
	raw[len(raw)/2] ^= 0x40 // one flipped bit in the state
	os.WriteFile(files[0], raw, 0o644)
	r2 := New(m, Options{Disk: openDisk(t, dir, 1<<30, testIdentity), CheckpointEvery: -1})
	req := Request{Prompt: append(slices.Clone(p[:20]), 7, 8, 9), MaxTokens: 3}
	want, _ := collect(t, New(m, Options{}), req)
	got, res := collect(t, r2, req)
	if res.CachedTokens != 0 || !slices.Equal(got, want) || r2.disk.Stats().Bad != 1 {
		t.Fatalf("corrupt file: cached %d, %v (want %v), disk %+v", res.CachedTokens, got, want, r2.disk.Stats())
	}
	if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
		t.Fatal("the corrupt file is still there")
	}

	collect(t, r2, Request{Prompt: p, MaxTokens: 1, Checkpoints: []int{20}}) // a good file again
	r2.disk.Flush()
	good := snapFiles(t, dir)
	raw, _ = os.ReadFile(good[0])
	os.WriteFile(filepath.Join(dir, "short"+snapSuffix), raw[:len(raw)-10], 0o644)
	os.WriteFile(filepath.Join(dir, tmpPrefix+"123"), raw, 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("kept"), 0o644)
	d := openDisk(t, dir, 1<<30, testIdentity)
	if st := d.Stats(); st.Files != len(good) || st.Bad != 1 {
		t.Fatalf("reopened: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, tmpPrefix+"123")); !os.IsNotExist(err) {
		t.Fatal("a temporary file survived")
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Fatal("a file Lily did not write was deleted")
	}
	foreign := openDisk(t, dir, 1<<30, prefixcache.Identity{Model: testIdentity.Model, Config: testIdentity.Config, Backend: "emu"})
	if st := foreign.Stats(); st.Files != 0 || len(snapFiles(t, dir)) != 0 {
		t.Fatalf("a file of another backend survived: %+v", st)
	}
}

// TestDiskBudget: past its budget the tier deletes the least recently used files.
func TestDiskBudget(t *testing.T) {
	dir := t.TempDir()
	m := tinyBackend(t)
	probe := openDisk(t, dir, 1<<30, testIdentity)
	r := New(m, Options{Disk: probe, CheckpointEvery: -1})
	collect(t, r, Request{Prompt: prompt(20, 0), MaxTokens: 1, Checkpoints: []int{19}})
	probe.Flush()
	one := probe.Stats().Bytes
	small := t.TempDir()
	d := openDisk(t, small, 2*one+one/2, testIdentity)
	r = New(m, Options{Disk: d, CheckpointEvery: -1})
	for salt := range 4 {
		collect(t, r, Request{Prompt: prompt(20, salt), MaxTokens: 1, Checkpoints: []int{19}})
		d.Flush()
	}
	st := d.Stats()
	if st.Files != 2 || st.Bytes > st.Budget {
		t.Fatalf("%+v: want the 2 newest files within the budget", st)
	}
	if d.Longest(prompt(20, 3)) == nil || d.Longest(prompt(20, 0)) != nil {
		t.Fatal("kept the wrong files")
	}
	if n := len(snapFiles(t, small)); n != 2 {
		t.Fatalf("%d snapshot files, want 2", n)
	}
}
