//go:build darwin || linux

package instance

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

var errHeld = errors.New("held by another process")

// tryLock takes an exclusive flock on f without blocking. flock locks belong to the open file,
// so a second open of the same file conflicts even within one process.
func tryLock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == unix.EINTR:
			continue // interrupted by a signal: try again
		case err == unix.EWOULDBLOCK:
			return errHeld
		}
		return err
	}
}
