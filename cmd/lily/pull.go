package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/engine/lifecycle/hub"
)

type pullOptions struct {
	repo, revision, dir string
	verify              bool
}

func newPullCmd() *cobra.Command {
	var o pullOptions
	cmd := &cobra.Command{
		Use:   "pull [--repo ID] [--revision REV] [--dir DIR] [--verify]",
		Short: "Download the checkpoint: parallel, resumable, verified",
		Long: `Download a checkpoint from the Hugging Face Hub, by default the pinned ` + lifecycle.DefaultRepo + `
into ` + lifecycle.ModelDir(lifecycle.DefaultRepo) + `.

An interrupted pull resumes where it stopped when run again. Every file is checked against
the Hub's checksum before it is put in place. A pull into a complete directory checks only
file sizes against the record of that verification (and, unless the revision is a commit id,
that the Hub's listing is unchanged); --verify re-hashes every file instead and downloads
again any that does not match. Symlinks inside the directory are refused, not followed.
HF_TOKEN authenticates (gated or private repos); HF_ENDPOINT selects a mirror. A second pull
into the same directory waits for the first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runPull(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.repo, "repo", lifecycle.DefaultRepo, "Hugging Face repo id (owner/name)")
	f.StringVar(&o.revision, "revision", lifecycle.DefaultRevision, "commit id (or branch) to download")
	f.StringVar(&o.dir, "dir", "", "destination directory (default: the data dir's Lily/models/<repo>)")
	f.BoolVar(&o.verify, "verify", false, "re-hash every file against the Hub's checksums, also in a complete directory, and download again those that do not match")
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
	mode := hub.VerifyFast
	if o.verify {
		mode = hub.VerifyFull
	}
	r, err := c.PullWith(ctx, o.repo, o.revision, dir, mode)
	ui.finish()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("pull interrupted; run it again to resume (%w)", err)
		}
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), describePull(r, dir))
	return nil
}

// describePull is the last line of a pull: that the directory is complete, and what that
// claim rests on, so a size check is never reported as a verification.
func describePull(r *hub.Result, dir string) string {
	m := r.Marker
	files := plural(len(m.Files), "file")
	s := fmt.Sprintf("%s@%s is complete in %s (%s, %s", m.Repo, m.Revision, dir, files, hub.FormatBytes(m.Size()))
	const notHashed = "; contents not re-hashed (lily pull --verify does that); nothing downloaded"
	switch r.Check {
	case hub.CheckMarker:
		return s + fmt.Sprintf("): checked file sizes against %s (%s, all present and matching), without asking the Hub (a commit's files cannot change)",
			hub.MarkerName, files) + notHashed
	case hub.CheckListing:
		return s + fmt.Sprintf("): checked that the Hub's listing of %s@%s matches %s, and file sizes against it (%s, all present and matching)",
			m.Repo, m.Revision, hub.MarkerName, files) + notHashed
	}
	s += ", verified): "
	if r.Downloaded == 0 {
		return s + fmt.Sprintf("re-hashed %s against the Hub's checksums: all match; nothing downloaded", plural(r.Hashed, "file"))
	}
	s += fmt.Sprintf("downloaded %s (%s)", plural(r.Downloaded, "file"), hub.FormatBytes(r.Bytes))
	if len(r.Replaced) > 0 {
		s += fmt.Sprintf(", replacing %d on disk that failed the re-hash (%s)", len(r.Replaced), strings.Join(r.Replaced, ", "))
	}
	if r.Hashed > 0 {
		s += fmt.Sprintf("; re-hashed and kept %s already on disk", plural(r.Hashed, "file"))
	}
	return s
}

// plural is "1 file", "2 files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
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
