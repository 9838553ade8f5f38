package logfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRotatesBySize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "Logs", "lily.log")
	w, err := Open(path, 20, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 7; i++ {
		fmt.Fprintf(w, "line %d.....\n", i) // 13 bytes: one line per file
	}
	w.Close()
	if got := read(t, path); got != "line 6.....\n" {
		t.Fatalf("current %q", got)
	}
	if got := read(t, path+".1"); got != "line 5.....\n" {
		t.Fatalf(".1 %q", got)
	}
	if got := read(t, path+".2"); got != "line 4.....\n" {
		t.Fatalf(".2 %q", got)
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Fatalf("kept more than 2 copies: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("write after Close succeeded")
	}
}

func TestAppendsToExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.log")
	os.WriteFile(path, []byte("old\n"), 0o644)
	w, err := Open(path, 1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("new\n"))
	w.Close()
	if got := read(t, path); got != "old\nnew\n" {
		t.Fatalf("%q", got)
	}
}

func TestConcurrentWritesStayWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	w, _ := Open(path, 400, 50)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				fmt.Fprintf(w, "goroutine %d line %02d\n", g, i)
			}
		}(g)
	}
	wg.Wait()
	w.Close()
	files, _ := filepath.Glob(path + "*")
	lines := 0
	for _, f := range files {
		for _, l := range strings.Split(strings.TrimSuffix(read(t, f), "\n"), "\n") {
			if !strings.HasPrefix(l, "goroutine ") || len(l) != len("goroutine 0 line 00") {
				t.Fatalf("%s: torn line %q", f, l)
			}
			lines++
		}
	}
	if lines != 200 {
		t.Fatalf("%d lines, want 200", lines)
	}
}

func TestOpenRejectsBadLimits(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "x.log"), 0, 1); err == nil {
		t.Fatal("maxBytes 0 accepted")
	}
}
