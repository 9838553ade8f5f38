//go:build unix

package hub

import "syscall"

const oNoFollow = syscall.O_NOFOLLOW
