// Package lifecycle is what happens around inference: where the checkpoint lives, getting it
// (sub-package hub), checking the machine (sub-package syscheck), and the startup phases that
// `lily serve` runs and the menu-bar app watches.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/adrg/xdg"

	"github.com/lilyformac/lily/engine/lifecycle/hub"
	"github.com/lilyformac/lily/internal/fsutil"
)

// The checkpoint Lily runs, pinned to a commit so every install gets the same bytes.
const (
	DefaultRepo     = "mlx-community/Qwen3.6-35B-A3B-4bit"
	DefaultRevision = "38740b847e4cb78f352aba30aa41c76e08e6eb46"

	// ModelBytes approximates DefaultRepo's size, for estimates made before its listing is known.
	ModelBytes = 19_400_000_000
	// RuntimeBytes is what inference needs besides the weights (KV cache, activations, kernels).
	RuntimeBytes = 1_500_000_000
)

// ModelsDir is where pulled checkpoints live: <XDG data home>/Lily/models, that is
// ~/Library/Application Support/Lily/models on macOS and ~/.local/share/Lily/models on Linux.
func ModelsDir() string { return filepath.Join(xdg.DataHome, "Lily", "models") }

// ModelDir is where repo ("org/name") is pulled by default. The revision is not part of the
// path: pulling a new pin into the same directory re-uses the unchanged files.
func ModelDir(repo string) string { return filepath.Join(ModelsDir(), filepath.FromSlash(repo)) }

// ResolveModelDir picks the checkpoint for commands that take --model: the flag's value if
// set, else the default pulled location if a pull of the pinned revision completed there, else
// an error that says to run `lily pull`.
func ResolveModelDir(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	dir := ModelDir(DefaultRepo)
	m, err := hub.Verify(context.Background(), dir, hub.VerifyFast, nil)
	switch {
	case err == nil && m.Repo == DefaultRepo && m.Revision == DefaultRevision:
		return dir, nil
	case err == nil:
		return "", fmt.Errorf("%s holds %s@%s, not the pinned %s@%s: run `lily pull` to update it, or pass --model DIR",
			dir, m.Repo, m.Revision, DefaultRepo, DefaultRevision)
	case errors.Is(err, hub.ErrMismatch):
		return "", fmt.Errorf("the model at %s is damaged (%v): run `lily pull` to repair it", dir, err)
	case !errors.Is(err, hub.ErrNotPulled):
		return "", err
	}
	if _, serr := os.Stat(dir); serr == nil {
		return "", fmt.Errorf("the download into %s has not finished: run `lily pull` to resume it, or pass --model DIR", dir)
	}
	return "", fmt.Errorf("no model at %s: run `lily pull` to download %s (%s), or pass --model DIR",
		dir, DefaultRepo, hub.FormatBytes(ModelBytes))
}

// Download is what `lily serve` without --model would fetch into Dir before it can serve,
// judged without the network, so the menu-bar app can ask before it starts one.
type Download struct {
	Dir      string
	Complete bool  // Dir holds a complete pull of the pinned revision: nothing to download
	Left     int64 // bytes still to download: ModelBytes less what a resumed pull keeps (an estimate)
	Free     int64 // bytes free on Dir's disk (-1: unknown)
}

// PendingDownload looks at dir (ModelDir(DefaultRepo) for serve's default) as the pull phase
// would before listing the Hub: the completion marker of the pinned revision with every file at
// its size, else how much is already there (hub.OnDisk).
func PendingDownload(dir string) Download {
	d := Download{Dir: dir, Free: -1}
	if m, err := hub.Verify(context.Background(), dir, hub.VerifyFast, nil); err == nil && m.Repo == DefaultRepo && m.Revision == DefaultRevision {
		d.Complete = true
	} else {
		d.Left = max(ModelBytes-hub.OnDisk(dir), 0)
	}
	if free, err := fsutil.FreeSpace(dir); err == nil {
		d.Free = int64(min(free, math.MaxInt64))
	}
	return d
}
