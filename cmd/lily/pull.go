package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/hub"
)

type pullOptions struct{ repo, revision, dir string }

func newPullCmd() *cobra.Command {
	var o pullOptions
	cmd := &cobra.Command{
		Use:   "pull [--repo ID] [--revision REV] [--dir DIR]",
		Short: "Download the checkpoint: parallel, resumable, verified",
		Long: `Download a checkpoint from the Hugging Face Hub, by default the pinned ` + lifecycle.DefaultRepo + `
into ` + lifecycle.ModelDir(lifecycle.DefaultRepo) + `.

An interrupted pull resumes where it stopped when run again. Every file is checked against
the Hub's checksum before it is put in place. HF_TOKEN authenticates (gated or private repos);
HF_ENDPOINT selects a mirror. A second pull into the same directory waits for the first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPull(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", lifecycle.DefaultRepo, "Hugging Face repo id (owner/name)")
	f.StringVar(&o.revision, "revision", lifecycle.DefaultRevision, "commit id (or branch) to download")
	f.StringVar(&o.dir, "dir", "", "destination directory (default: the data dir's Lily/models/<repo>)")
	return cmd
}

func runPull(cmd *cobra.Command, o pullOptions) error {
	if err := hub.ValidateRepo(o.repo); err != nil {
		return fmt.Errorf("--repo: %w", err)
	}
	dir := o.dir
	if dir == "" {
		dir = lifecycle.ModelDir(o.repo)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ui := newPullUI(cmd.ErrOrStderr())
	c := hub.New()
	c.Progress, c.Logf = ui.update, ui.logf
	m, err := c.Pull(ctx, o.repo, o.revision, dir)
	ui.finish()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("pull interrupted; run it again to resume (%w)", err)
		}
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s@%s is complete in %s (%d files, %s, verified)\n",
		m.Repo, m.Revision, dir, len(m.Files), hub.FormatBytes(m.Size()))
	return nil
}

// pullUI shows hub progress: a progress bar with speed and ETA on a terminal, a plain line
// every plainEvery otherwise (logs, CI, the menu-bar app's pipe).
type pullUI struct {
	mu         sync.Mutex
	w          io.Writer
	tty        bool
	bar        *progressbar.ProgressBar
	plainEvery time.Duration
	begun      time.Time // first update with bytes to fetch
	lastLine   time.Time
	last       hub.Progress
}

func newPullUI(w io.Writer) *pullUI {
	u := &pullUI{w: w, plainEvery: 5 * time.Second}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			u.tty = true
		}
	}
	return u
}

func (u *pullUI) update(p hub.Progress) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.last = p
	if p.Total <= p.Start { // complete already: nothing to show
		return
	}
	if u.begun.IsZero() {
		u.begun = time.Now()
		if p.Start > 0 {
			fmt.Fprintf(u.w, "resuming: %s of %s already on disk\n", hub.FormatBytes(p.Start), hub.FormatBytes(p.Total))
		}
	}
	// Speed and ETA are about this run's bytes, so the bar counts from the resume point.
	if u.tty {
		if u.bar == nil {
			u.bar = progressbar.NewOptions64(p.Total-p.Start,
				progressbar.OptionSetWriter(u.w),
				progressbar.OptionShowBytes(true),
				progressbar.OptionShowTotalBytes(true),
				progressbar.OptionShowCount(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionFullWidth(),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(u.w) }),
			)
		}
		u.bar.Describe(fmt.Sprintf("%d/%d files", p.FilesDone, p.Files))
		u.bar.Set64(max(p.Done-p.Start, 0))
		return
	}
	if now := time.Now(); now.Sub(u.lastLine) >= u.plainEvery || p.Done == p.Total {
		u.lastLine = now
		fmt.Fprintln(u.w, plainLine(p, now.Sub(u.begun)))
	}
}

// plainLine is one progress line: bytes, percent, speed, ETA, current file.
func plainLine(p hub.Progress, elapsed time.Duration) string {
	s := fmt.Sprintf("pull: %s of %s (%.0f%%), %d/%d files", hub.FormatBytes(p.Done), hub.FormatBytes(p.Total),
		100*float64(p.Done)/float64(max(p.Total, 1)), p.FilesDone, p.Files)
	if got := p.Done - p.Start; got > 0 && elapsed > 0 {
		rate := float64(got) / elapsed.Seconds()
		eta := time.Duration(float64(p.Total-p.Done) / rate * float64(time.Second))
		s += fmt.Sprintf(", %s/s, ETA %s", hub.FormatBytes(int64(rate)), eta.Round(time.Second))
	}
	if p.File != "" && p.Done < p.Total {
		s += ", " + p.File
	}
	return s
}

func (u *pullUI) logf(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.bar != nil {
		u.bar.Clear()
	}
	fmt.Fprintf(u.w, "pull: "+format+"\n", args...)
}

func (u *pullUI) finish() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.bar != nil && u.last.Done == u.last.Total {
		u.bar.Finish()
	} else if u.bar != nil {
		fmt.Fprintln(u.w) // leave the interrupted bar on its own line
	}
}
