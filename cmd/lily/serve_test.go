package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/server"
)

// TestServeStartupFailsThenRetries: a checkpoint without a tokenizer fails in the load phase with
// a clear error; once the file is there, a retry walks verify → checks → load → warm → ready and
// publishes the model.
func TestServeStartupFailsThenRetries(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	demo, err := demoDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "chat_template.jinja"} {
		if err := os.Symlink(filepath.Join(demo, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	var published *server.Model
	var closers int
	publish := func(m *server.Model, closeFn func()) {
		if m != nil {
			published = m
		}
		if closeFn != nil {
			closers++
		}
	}
	state := lifecycle.NewState(io.Discard)
	r := &lifecycle.Runner{State: state, Steps: startupSteps(serveOptions{model: dir, backend: "cpu", cacheMB: 16}, publish)}
	if err := r.Run(context.Background()); err == nil {
		t.Fatal("startup succeeded without tokenizer.json")
	}
	st := state.Status()
	if st.Phase != lifecycle.PhaseError || st.FailedPhase != lifecycle.PhaseLoad || !strings.Contains(st.Error, "tokenizer.json") {
		t.Fatalf("status after failure: %+v", st)
	}
	if published != nil {
		t.Fatal("a model was published although loading failed")
	}
	if err := os.Symlink(filepath.Join(demo, "tokenizer.json"), filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	if err := r.Retry(context.Background()); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if st := state.Status(); st.Phase != lifecycle.PhaseReady {
		t.Fatalf("status after retry: %+v", st)
	}
	if published == nil || published.ID != filepath.Base(dir) || published.Context != 32768 || closers != 1 {
		t.Fatalf("published %+v, closers %d", published, closers)
	}
}
