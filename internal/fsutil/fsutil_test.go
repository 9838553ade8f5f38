package fsutil

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestWriteFileAtomicAndFreeSpace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.json")
	for _, s := range []string{"one", "two"} {
		if err := WriteFileAtomic(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(p); string(got) != s {
			t.Fatalf("got %q, want %q", got, s)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "m.json"), []byte("x"), 0o644); err == nil {
		t.Error("no error writing into a missing directory")
	}
	// A directory that does not exist yet is answered for its nearest existing parent.
	free, err := FreeSpace(filepath.Join(dir, "not", "yet"))
	if (runtime.GOOS == "linux" || runtime.GOOS == "darwin") && (err != nil || free == 0) {
		t.Fatalf("free %d, err %v", free, err)
	}
}
