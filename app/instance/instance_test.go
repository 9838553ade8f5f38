package instance

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if path := os.Getenv("LILY_INSTANCE_HOLDER"); path != "" {
		// A second process holding the lock: it says so, then waits to be killed (at most a minute).
		if _, err := Acquire(path); err != nil {
			os.Stdout.WriteString("error " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("locked\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSecondAcquireFails: while one lock is held, another Acquire of the same file fails with
// ErrRunning and the holder's pid; after Release it succeeds.
func TestSecondAcquireFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "Lily", "app.lock") // the directory is created
	l, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	if Holder(path) != os.Getpid() {
		t.Fatalf("the lock file names pid %d, want %d", Holder(path), os.Getpid())
	}
	_, err = Acquire(path)
	var re *RunningError
	if !errors.Is(err, ErrRunning) || !errors.As(err, &re) || re.PID != os.Getpid() {
		t.Fatalf("second Acquire: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(path)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// TestLockDiesWithItsHolder: another process holding the lock keeps this one out; once it is
// killed (a crash: nothing released), the lock is free at once, whatever the file still says.
func TestLockDiesWithItsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.lock")
	holder := exec.Command(os.Args[0], "-test.run=^$")
	holder.Env = append(os.Environ(), "LILY_INSTANCE_HOLDER="+path)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	said := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		said <- strings.TrimSpace(line)
	}()
	select {
	case s := <-said:
		if s != "locked" {
			t.Fatalf("holder: %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder never took the lock")
	}
	_, err = Acquire(path)
	var re *RunningError
	if !errors.As(err, &re) || re.PID != holder.Process.Pid {
		t.Fatalf("Acquire while another process holds it: %v, want the holder's pid %d", err, holder.Process.Pid)
	}
	holder.Process.Kill()
	holder.Wait()
	l, err := Acquire(path)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	l.Release()
}
