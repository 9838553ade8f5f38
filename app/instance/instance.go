// Package instance keeps the menu-bar app to one running copy per user: the first copy holds an
// exclusive flock on a lock file in the app's support directory for as long as it runs, and a
// second copy (another Lily.app from Downloads, a double-click racing a login launch) learns the
// first one's pid and exits instead of starting a second 19.4 GB engine. The kernel drops the lock
// when its holder exits, however it exits, so a crashed copy never blocks the next launch, as a
// pid file alone would.
package instance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrRunning is Acquire's answer when another copy holds the lock; the error that wraps it is a
// *RunningError.
var ErrRunning = errors.New("another copy of Lily is running")

// RunningError names the copy that holds the lock.
type RunningError struct {
	PID int // 0: unknown (it has not written its pid yet)
}

func (e *RunningError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("%v (pid %d)", ErrRunning, e.PID)
	}
	return ErrRunning.Error()
}

func (e *RunningError) Unwrap() error { return ErrRunning }

// Lock is a held lock. Keep it reachable for the app's lifetime: the open file is the lock.
type Lock struct {
	f *os.File
}

// Acquire takes the lock at path (creating it and its directory), without waiting, and writes
// this process's pid into it. The file is opened close-on-exec (Go's default), so the engine the
// app starts does not inherit the lock and cannot keep it past the app.
func Acquire(path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := tryLock(f); err != nil {
		f.Close()
		if errors.Is(err, errHeld) {
			return nil, &RunningError{PID: Holder(path)}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up (exiting does too).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Holder is the pid written in the lock file at path (0: none or unreadable).
func Holder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
