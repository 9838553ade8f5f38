package mtl

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// CheckUTF8 reports a string Foundation would refuse: NSString's initWithBytes:length:encoding:
// returns nil for bytes that are not valid UTF-8, and passing that nil on raises an
// Objective-C exception (fatal). Every string the binding hands to Objective-C is checked first.
func CheckUTF8(s string) error {
	if utf8.ValidString(s) {
		return nil
	}
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		i += n
	}
	return fmt.Errorf("mtl: string is not valid UTF-8 (byte %d of %d is %#02x)", i, len(s), s[i])
}

// CommandBufferErrorCode is an MTLCommandBufferError code: the NSError code of a failed command
// buffer (MTLCommandBufferErrorDomain).
type CommandBufferErrorCode int

// The codes Apple defines (MTLCommandBuffer.h); 5 and 6 are unassigned, 4 was once "blacklisted".
const (
	CommandBufferErrorNone            CommandBufferErrorCode = 0
	CommandBufferErrorInternal        CommandBufferErrorCode = 1
	CommandBufferErrorTimeout         CommandBufferErrorCode = 2
	CommandBufferErrorPageFault       CommandBufferErrorCode = 3
	CommandBufferErrorAccessRevoked   CommandBufferErrorCode = 4
	CommandBufferErrorNotPermitted    CommandBufferErrorCode = 7
	CommandBufferErrorOutOfMemory     CommandBufferErrorCode = 8
	CommandBufferErrorInvalidResource CommandBufferErrorCode = 9
	CommandBufferErrorMemoryless      CommandBufferErrorCode = 10
	CommandBufferErrorDeviceRemoved   CommandBufferErrorCode = 11
	CommandBufferErrorStackOverflow   CommandBufferErrorCode = 12
)

func (c CommandBufferErrorCode) String() string {
	switch c {
	case CommandBufferErrorNone:
		return "none"
	case CommandBufferErrorInternal:
		return "internal error"
	case CommandBufferErrorTimeout:
		return "timeout: the system ended the command buffer for running longer than it allows (the GPU watchdog)"
	case CommandBufferErrorPageFault:
		return "page fault: a kernel touched memory the GPU cannot map"
	case CommandBufferErrorAccessRevoked:
		return "access revoked: the system stopped taking this process's GPU work after too many timeouts or hangs"
	case CommandBufferErrorNotPermitted:
		return "not permitted: the process may not use the GPU (e.g. in the background)"
	case CommandBufferErrorOutOfMemory:
		return "out of memory"
	case CommandBufferErrorInvalidResource:
		return "invalid resource: a command referenced a released or invalid buffer"
	case CommandBufferErrorMemoryless:
		return "memoryless attachment storage exhausted"
	case CommandBufferErrorDeviceRemoved:
		return "device removed"
	case CommandBufferErrorStackOverflow:
		return "stack overflow in a kernel"
	}
	return fmt.Sprintf("code %d", int(c))
}

// ErrWatchdog is matched (errors.Is) by a CommandBufferError the system's GPU watchdog caused:
// a timeout, access revoked after repeated timeouts, or an IOGPU abort for impacting
// interactivity or for earlier excessive errors (both reported in the description, which names
// the IOKit callback error). Such a command buffer carried too much work; see
// exec.Executor.Budget.
var ErrWatchdog = errors.New("mtl: the GPU watchdog ended a command buffer")

// CommandBufferError is a failed command buffer's NSError.
type CommandBufferError struct {
	Code        CommandBufferErrorCode
	Description string // localizedDescription
}

func (e *CommandBufferError) Error() string {
	msg := "mtl: command buffer failed: " + e.Code.String()
	if e.Description != "" {
		msg += " (" + e.Description + ")"
	}
	if e.Watchdog() {
		msg += "; a command buffer must carry less work"
	}
	return msg
}

// Watchdog reports whether the system ended the command buffer for running too long.
func (e *CommandBufferError) Watchdog() bool {
	switch e.Code {
	case CommandBufferErrorTimeout, CommandBufferErrorAccessRevoked:
		return true
	}
	for _, s := range []string{"ImpactingInteractivity", "SubmissionsIgnored", "Timeout"} {
		if strings.Contains(e.Description, s) {
			return true
		}
	}
	return false
}

// Is makes errors.Is(err, ErrWatchdog) hold for a watchdog error.
func (e *CommandBufferError) Is(target error) bool { return target == ErrWatchdog && e.Watchdog() }

// ErrNoResidencySets is returned by NewResidencySet where MTLResidencySet is missing: macOS
// before 15 (the class and the device's newResidencySetWithDescriptor:error: are absent), a GPU
// that lacks it (paravirtualised), or a system without Metal.
var ErrNoResidencySets = errors.New("mtl: residency sets need macOS 15 or later")
