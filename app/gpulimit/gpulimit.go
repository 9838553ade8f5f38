// Package gpulimit is the menu-bar app's offer to raise macOS's GPU memory limit
// (iogpu.wired_limit_mb) on a Mac whose default limit cannot hold the model, such as a 24 GB
// Mac: the limit it sets (internal/wiredlimit decides it, as for `lily doctor`), the words the
// menu and the administrator prompt show, and the one command that runs it. It is portable; only
// reading the Mac's memory needs macOS.
package gpulimit

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/lilyformac/lily/internal/wiredlimit"
)

// Offer is one proposed raise of the limit.
type Offer struct {
	MB      uint64   // the limit it sets: iogpu.wired_limit_mb, in MiB
	Memory  uint64   // the Mac's memory in bytes
	Problem string   // the menu's detail line while the engine fails for want of GPU memory
	Title   string   // the menu item that offers the raise
	Text    string   // what it does, said plainly: the menu item's tooltip
	Prompt  string   // what the administrator prompt says
	Argv    []string // the command that raises it: osascript, which asks for an administrator once
	Done    string   // the menu's notice once it is raised
}

// For is the offer for a Mac with memBytes of memory whose limit is currentMB now (0: macOS's
// default); false when memBytes is unknown, or the limit is already as high as Lily suggests.
func For(memBytes, currentMB uint64) (Offer, bool) {
	mb := wiredlimit.SuggestedMB(memBytes)
	if mb == 0 || currentMB >= mb {
		return Offer{}, false
	}
	gpu, mac, total := wiredlimit.GB(mb<<20), wiredlimit.GB(memBytes-mb<<20), wiredlimit.GB(memBytes)
	o := Offer{MB: mb, Memory: memBytes}
	o.Problem = "macOS lets the GPU use too little memory for the model"
	o.Title = fmt.Sprintf("Raise the GPU Memory Limit to %s…", gpu)
	o.Text = fmt.Sprintf("Lets the GPU use up to %s of this Mac's %s, which leaves macOS %s. It lasts until the Mac restarts. Asks once for an administrator's password to run: %s",
		gpu, total, mac, wiredlimit.Command(mb))
	o.Prompt = fmt.Sprintf("Lily needs more memory for the GPU than macOS allows by default. Raising the GPU memory limit to %s leaves macOS %s of this Mac's %s, and lasts until the Mac restarts.",
		gpu, mac, total)
	script := fmt.Sprintf(`do shell script "/usr/sbin/sysctl iogpu.wired_limit_mb=%d" with prompt "%s" with administrator privileges`, mb, quote(o.Prompt))
	o.Argv = []string{"/usr/bin/osascript", "-e", script}
	o.Done = fmt.Sprintf("The GPU may now use %s until the Mac restarts; starting Lily again", gpu)
	return o, true
}

// quote escapes s for an AppleScript string literal.
func quote(s string) string { return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) }

// Wanted reports whether an engine error is for want of GPU memory: the engine names
// iogpu.wired_limit_mb in those (its gpu-memory and context checks, and the KV cache's sizing
// when the weights do not fit).
func Wanted(engineError string) bool { return strings.Contains(engineError, "iogpu.wired_limit_mb") }

// ErrCancelled is Run's error when the user dismissed the administrator prompt.
var ErrCancelled = errors.New("cancelled")

// Run runs o.Argv and waits for it (the administrator prompt waits for the user).
func Run(o Offer) error { return run(o.Argv) }

func run(argv []string) error {
	if len(argv) == 0 {
		return errors.New("no command")
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if strings.Contains(msg, "(-128)") { // osascript: "execution error: User canceled. (-128)"
		return ErrCancelled
	}
	if msg == "" {
		return err
	}
	return fmt.Errorf("%v: %s", err, msg)
}

// System is this Mac: its memory and current limit from sysctl (nothing off macOS, so never an
// offer), and Run.
type System struct{}

// Offer is For this Mac now.
func (System) Offer() (Offer, bool) { return For(wiredlimit.Memory(), wiredlimit.CurrentMB()) }

// Raise runs the offer's command (Run).
func (System) Raise(o Offer) error { return Run(o) }
