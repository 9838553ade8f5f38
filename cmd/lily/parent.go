package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// exitWithParentHelp is serve's --exit-with-parent flag: the menu-bar app passes it, with the read
// end of a pipe as standard input whose write end only the app holds. When the app ends, crash and
// SIGKILL included, the kernel closes that end, serve reads end-of-file and shuts down as on
// SIGTERM, so an orphaned engine does not keep ~20 GB wired until the app's next launch.
const exitWithParentHelp = "shut down, as on SIGTERM, when standard input (a pipe from the program that started serve) reaches end of file: that program has ended"

// checkParentPipe refuses --exit-with-parent when standard input is not a pipe or socket: a
// terminal would stop serve at a stray Ctrl-D, /dev/null at once.
func checkParentPipe(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("--exit-with-parent: standard input: %w", err)
	}
	if fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return errors.New("--exit-with-parent needs standard input to be a pipe from the program that starts serve (the menu-bar app passes one)")
	}
	return nil
}

// withParent returns a context that ends with ctx or when r reaches end of file (or fails), the
// parent having gone; what the parent writes is ignored. It logs why it ended.
func withParent(ctx context.Context, r io.Reader, log io.Writer) context.Context {
	// The parent's end of the log pipes goes with it: a line written to a closed stderr would
	// otherwise kill serve with SIGPIPE halfway through its shutdown. Writes then fail with EPIPE.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := io.Copy(io.Discard, r) // returns at end of file (err nil) or a read error
		if ctx.Err() == nil {
			why := "standard input closed"
			if err != nil {
				why = err.Error()
			}
			fmt.Fprintf(log, "lily: the program that started serve has ended (%s)\n", why)
		}
		cancel()
	}()
	return ctx
}
