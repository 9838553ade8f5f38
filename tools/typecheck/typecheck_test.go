package main

import (
	"strings"
	"testing"
)

func run(t *testing.T, pattern string) (int, []string) {
	t.Helper()
	pkgs, err := list("darwin", "arm64", []string{pattern})
	if err != nil {
		t.Fatal(err)
	}
	targets, _, errs := check(pkgs, "arm64", false)
	return targets, errs
}

// TestChecksDarwinCgoCode: darwin-only cgo files are checked (C.xxx accepted), linux-only files
// are not, and a type error in the named package fails.
func TestChecksDarwinCgoCode(t *testing.T) {
	if n, errs := run(t, "./testdata/good"); n != 1 || len(errs) != 0 {
		t.Fatalf("good: %d packages, errors %v", n, errs)
	}
	_, errs := run(t, "./testdata/bad")
	if len(errs) != 1 || !strings.Contains(errs[0], "bad_darwin.go:13") || !strings.Contains(errs[0], "cannot use \"one\"") {
		t.Fatalf("bad: %v", errs)
	}
}

// TestFlagsGoPointersPassedToObjectiveC: the two wrong calls are reported, the right ones not.
func TestFlagsGoPointersPassedToObjectiveC(t *testing.T) {
	_, errs := run(t, "./testdata/ptr")
	if len(errs) != 2 || !strings.Contains(errs[0]+errs[1], "ptr_darwin.go:19:12") || !strings.Contains(errs[0]+errs[1], "ptr_darwin.go:20:48") {
		t.Fatalf("%q", errs)
	}
}
