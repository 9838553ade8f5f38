package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/adrg/xdg"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/engine/lifecycle/hub/hubtest"
)

// isolate points HF_* at a fake hub serving org/tiny@v1 and the data dir at a temporary one.
func isolate(t *testing.T, files map[string][]byte) *hubtest.Hub { return isolateAt(t, "v1", files) }

func isolateAt(t *testing.T, rev string, files map[string][]byte) *hubtest.Hub {
	return isolateRepo(t, "org/tiny", rev, files)
}

// isolateRepo serves files as repo@rev from a fake Hub, points HF_* at it and the data directory
// at a temporary one.
func isolateRepo(t *testing.T, repo, rev string, files map[string][]byte) *hubtest.Hub {
	fh := hubtest.New(t, repo, rev, files)
	t.Setenv("HF_ENDPOINT", fh.URL())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	xdg.Reload()
	t.Cleanup(xdg.Reload)
	return fh
}

func TestPullCommand(t *testing.T) {
	fh := isolate(t, map[string][]byte{"config.json": []byte("{}"), "model.safetensors": make([]byte, 5000)})
	out, err := execute(t, "pull", "--repo", "org/tiny", "--revision", "v1")
	if err != nil {
		t.Fatal(err, out)
	}
	dir := lifecycle.ModelDir("org/tiny")
	for _, want := range []string{"pull: 5.0 kB of 5.0 kB (100%), 2/2 files", "org/tiny@v1 is complete in " + dir + " (2 files, 5.0 kB, verified)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	fh.ResetServed()
	if out, err := execute(t, "pull", "--repo", "org/tiny", "--revision", "v1", "--dir", dir); err != nil || !strings.Contains(out, "is complete") || fh.Served() != 0 {
		t.Fatalf("rerun: %v, served %d:\n%s", err, fh.Served(), out)
	}
	for _, tc := range []struct{ args, want string }{
		{"--repo org/missing --revision v1", "repo org/missing not found (HTTP 404): check --repo"},
		{"--repo org/tiny --revision v2", "revision v2 not found in org/tiny"},
		{"--repo ../etc", `--repo: repo "../etc": expected a Hugging Face id like owner/name`},
	} {
		if _, err := execute(t, append([]string{"pull"}, strings.Fields(tc.args)...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pull %s: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestPullProgressDisplay(t *testing.T) {
	p := hub.Progress{Done: 5e9, Total: 19.4e9, Start: 1e9, File: "model-00002-of-00004.safetensors", FilesDone: 3, Files: 12}
	want := "pull: 5.0 GB of 19.4 GB (26%), 3/12 files, 40.0 MB/s, ETA 6m0s, model-00002-of-00004.safetensors"
	if got := plainLine(p, 100*time.Second); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}

	// On a terminal the bar counts this run's bytes, after a note about the resume point.
	var buf bytes.Buffer
	u := &pullUI{w: &buf, tty: true}
	u.update(hub.Progress{Done: 1e6, Total: 4e6, Start: 1e6, Files: 2})
	u.update(hub.Progress{Done: 4e6, Total: 4e6, Start: 1e6, FilesDone: 2, Files: 2})
	u.finish()
	if out := buf.String(); !strings.Contains(out, "resuming: 1.0 MB of 4.0 MB already on disk") || !strings.Contains(out, "100%") || !strings.Contains(out, "2/2 files") {
		t.Fatalf("bar output %q", out)
	}
}

// A rerun on a complete folder says what it checked; --verify re-hashes every file and
// downloads again only those that do not match.
func TestPullRerunSaysWhatItCheckedAndVerifyRehashes(t *testing.T) {
	fh := isolate(t, map[string][]byte{"config.json": []byte("{}"), "model.safetensors": make([]byte, 5000)})
	pull := func(extra ...string) string {
		t.Helper()
		fh.ResetServed()
		out, err := execute(t, append([]string{"pull", "--repo", "org/tiny", "--revision", "v1"}, extra...)...)
		if err != nil {
			t.Fatal(err, out)
		}
		return out
	}
	pull()
	dir := lifecycle.ModelDir("org/tiny")
	checks := func(out string, served int64, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
		if fh.Served() != served {
			t.Errorf("served %d bytes, want %d:\n%s", fh.Served(), served, out)
		}
	}

	out := pull()
	checks(out, 0, "org/tiny@v1 is complete in "+dir+" (2 files, 5.0 kB): checked that the Hub's listing of org/tiny@v1 matches "+hub.MarkerName+
		", and file sizes against it (2 files, all present and matching); contents not re-hashed (lily pull --verify does that); nothing downloaded")
	if strings.Contains(out, "verified") {
		t.Errorf("a size check is reported as a verification:\n%s", out)
	}

	// Same-size damage: only --verify sees it, says so, and downloads just that file again.
	os.WriteFile(filepath.Join(dir, "model.safetensors"), append(make([]byte, 4999), 1), 0o644)
	checks(pull("--verify"), 5000,
		"pull: model.safetensors: sha256 is ", "the Hub lists "+hubtest.SHA256(make([]byte, 5000))+": verification failed; downloading it again",
		"org/tiny@v1 is complete in "+dir+" (2 files, 5.0 kB, verified): downloaded 1 file (5.0 kB), "+
			"replacing 1 on disk that failed the re-hash (model.safetensors); re-hashed and kept 1 file already on disk")
	if got, _ := os.ReadFile(filepath.Join(dir, "model.safetensors")); !bytes.Equal(got, make([]byte, 5000)) {
		t.Fatal("the damaged file was not repaired")
	}
	checks(pull("--verify"), 0, "(2 files, 5.0 kB, verified): re-hashed 2 files against the Hub's checksums: all match; nothing downloaded")
}

// With a commit id the rerun does not ask the Hub at all, and says that.
func TestPullRerunOfACommitIsOffline(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	fh := isolateAt(t, commit, map[string][]byte{"config.json": []byte("{}")})
	args := []string{"pull", "--repo", "org/tiny", "--revision", commit}
	if out, err := execute(t, args...); err != nil {
		t.Fatal(err, out)
	}
	fh.ResetServed()
	out, err := execute(t, args...)
	want := "(1 file, 2 B): checked file sizes against " + hub.MarkerName +
		" (1 file, all present and matching), without asking the Hub (a commit's files cannot change); contents not re-hashed"
	if err != nil || !strings.Contains(out, want) || len(fh.Calls()) != 0 {
		t.Fatalf("err %v, %d requests; output lacks %q:\n%s", err, len(fh.Calls()), want, out)
	}
}
