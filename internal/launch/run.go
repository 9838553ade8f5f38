package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// Stdio are the streams the client inherits.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
}

// Run starts the client, found on PATH, with the setup and waits for it. It returns the client's
// exit status (128+N when signal N ended it, as shells report it); err is for a client that
// could not start.
func (s Setup) Run(stdio Stdio) (int, error) {
	path, err := exec.LookPath(s.Client.Name)
	if err != nil {
		return 0, fmt.Errorf("%s is not installed (no %q on PATH): npm install -g %s", s.Client.Title, s.Client.Name, s.Client.Package)
	}
	cmd := exec.Command(path, s.Args...)
	cmd.Env = s.Environ(os.Environ())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.In, stdio.Out, stdio.Err

	// Ctrl-C and Ctrl-\ reach the whole foreground process group, the client included, which
	// decides what they mean (Claude Code exits on a second Ctrl-C): passing them on would send
	// them twice. lily only has to outlive the client to report its status. A SIGTERM sent to
	// lily alone goes on to the client.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGQUIT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", s.Client.Name, err)
	}
	done := make(chan struct{})
	defer close(done)
	go forwardTerm(cmd.Process, sigs, done)
	return exitStatus(cmd.Wait())
}

func forwardTerm(p *os.Process, sigs <-chan os.Signal, done <-chan struct{}) {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTERM {
				p.Signal(sig)
			}
		case <-done:
			return
		}
	}
}

func exitStatus(err error) (int, error) {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return 0, err
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return exit.ExitCode(), nil
}
