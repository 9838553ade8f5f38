package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lilyformac/lily/app/supervisor"
)

// TestServeTakesTheAppsArgs: the command line the menu-bar app's supervisor runs parses as serve's
// flags, --exit-with-parent included (the supervisor's tests run a fake engine).
func TestServeTakesTheAppsArgs(t *testing.T) {
	args := supervisor.Options{Host: "127.0.0.1", Port: 8000, ModelDir: "/m"}.Args()
	cmd := newServeCmd()
	if args[0] != "serve" || cmd.Name() != "serve" {
		t.Fatalf("args %q", args)
	}
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("serve rejects the app's %q: %v", args, err)
	}
	if on, err := cmd.Flags().GetBool("exit-with-parent"); err != nil || !on {
		t.Fatalf("--exit-with-parent not set by the app's args %q (%v)", args, err)
	}
}

// TestServeExitWithParentHelper is `lily serve --exit-with-parent` as a process, for
// TestServeExitsWithParent: an empty --model directory fails startup at once and cheaply (no
// weights), and serve keeps listening, as it does for the menu-bar app.
func TestServeExitWithParentHelper(t *testing.T) {
	dir := os.Getenv("LILY_PARENT_HELPER")
	if dir == "" {
		t.Skip("run by TestServeExitsWithParent")
	}
	os.Args = []string{"lily", "serve", "--model", dir, "--backend", "cpu", "--port", "0", "--disk-cache-gb", "0", "--exit-with-parent"}
	main()
	os.Exit(0) // main returned: serve ended cleanly
}

// serveChild starts the helper with stdin as given and returns its stderr lines and its exit.
func serveChild(t *testing.T, stdin *os.File) (*exec.Cmd, <-chan string, <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeExitWithParentHelper$")
	cmd.Env = append(os.Environ(), "LILY_PARENT_HELPER="+t.TempDir(), "XDG_CACHE_HOME="+t.TempDir())
	cmd.Stdin = stdin
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) // bounded whatever the test's outcome
	lines, exited := make(chan string, 100), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // the test reads what it waits for; the rest may drop
			}
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	return cmd, lines, exited
}

// waitLine reads lines until one contains want, within d; it returns what it read.
func waitLine(t *testing.T, lines <-chan string, want string, d time.Duration) string {
	t.Helper()
	var seen []string
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve ended before %q:\n%s", want, strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, want) {
				return strings.Join(seen, "\n")
			}
		case <-deadline:
			t.Fatalf("no %q within %s:\n%s", want, d, strings.Join(seen, "\n"))
		}
	}
}

// TestServeExitsWithParent: serve started with --exit-with-parent and a pipe as stdin keeps
// serving while the pipe's other end is open, and shuts down cleanly (status 0, "shutting down")
// within a few seconds once it closes — as it closes when the menu-bar app crashes. Without a
// pipe the flag is refused before serve listens.
func TestServeExitsWithParent(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, lines, exited := serveChild(t, r)
	r.Close() // only the child holds the read end; only this test the write end
	waitLine(t, lines, "listening at", 60*time.Second)
	w.Write([]byte("ignored\n")) // what the parent writes is no reason to stop
	select {
	case err := <-exited:
		t.Fatalf("serve exited while its parent's pipe was open: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	closed := time.Now()
	w.Close()
	out := waitLine(t, lines, "shutting down", 5*time.Second)
	if !strings.Contains(out, "the program that started serve has ended (standard input closed)") {
		t.Errorf("no reason logged:\n%s", out)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve exited with %v, want status 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve still runs 5 s after its parent's pipe closed")
	}
	t.Logf("serve exited %v after the pipe closed", time.Since(closed).Round(time.Millisecond))

	// Standard input /dev/null (a plain Stdin of nil): refused, exit status 1, never listening.
	_, lines, exited = serveChild(t, nil)
	out = waitLine(t, lines, "needs standard input to be a pipe", 30*time.Second)
	if strings.Contains(out, "listening at") {
		t.Errorf("serve listened before refusing:\n%s", out)
	}
	var ee *exec.ExitError
	select {
	case err := <-exited:
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want status 1", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve with --exit-with-parent and no pipe did not exit")
	}
}
