//go:build darwin || linux

package fsutil

import "golang.org/x/sys/unix"

func freeSpace(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	// Bavail (not Bfree): blocks reserved for root are not ours to fill.
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
