package mtl

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckUTF8: strings NSString would turn into nil are refused with the offending byte;
// valid ones (ASCII, multi-byte, empty, embedded NUL) pass.
func TestCheckUTF8(t *testing.T) {
	for _, s := range []string{"", "kernel void k() {}", "/Users/zoë/Library/Caches", "a\x00b"} {
		if err := CheckUTF8(s); err != nil {
			t.Errorf("CheckUTF8(%q) = %v", s, err)
		}
	}
	err := CheckUTF8("/tmp/caf\xe9/x")
	if err == nil || !strings.Contains(err.Error(), "byte 8 of 11 is 0xe9") {
		t.Fatalf("CheckUTF8 of Latin-1 bytes: %v", err)
	}
}

// TestCommandBufferErrorCodes: Apple's MTLCommandBufferError codes read as what they mean, and
// the watchdog's (timeout, access revoked, the IOGPU interactivity abort) match ErrWatchdog.
func TestCommandBufferErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err      CommandBufferError
		text     string
		watchdog bool
	}{
		{CommandBufferError{Code: 2, Description: "Execution of the command buffer was aborted due to an error during execution."}, "timeout: the system ended the command buffer for running longer than it allows (the GPU watchdog)", true},
		{CommandBufferError{Code: 4}, "access revoked", true},
		{CommandBufferError{Code: 1, Description: "Impacting Interactivity (0000000e:kIOGPUCommandBufferCallbackErrorImpactingInteractivity)"}, "internal error", true},
		{CommandBufferError{Code: 3}, "page fault", false},
		{CommandBufferError{Code: 8}, "out of memory", false},
		{CommandBufferError{Code: 9}, "invalid resource", false},
		{CommandBufferError{Code: 5}, "code 5", false},
	} {
		err := error(&c.err)
		if !strings.Contains(err.Error(), c.text) {
			t.Errorf("code %d: %q lacks %q", c.err.Code, err, c.text)
		}
		if got := errors.Is(err, ErrWatchdog); got != c.watchdog {
			t.Errorf("code %d (%q): errors.Is(ErrWatchdog) = %v", c.err.Code, c.err.Description, got)
		}
		if c.watchdog && !strings.Contains(err.Error(), "must carry less work") {
			t.Errorf("watchdog error %q does not say what to do", err)
		}
	}
}

// TestLanguageVersionsMatchHeaders: the MTLLanguageVersion values are Apple's (MTLLibrary.h:
// MTLLanguageVersion3_0 = (3 << 16) + 0 … MTLLanguageVersion4_0 = (4 << 16) + 0, the last one).
func TestLanguageVersionsMatchHeaders(t *testing.T) {
	for v, want := range map[LanguageVersion]uint{LanguageVersion3_0: 196608, LanguageVersion3_1: 196609, LanguageVersion3_2: 196610, LanguageVersion4_0: 262144} {
		if uint(v) != want {
			t.Errorf("%#x, want %d", uint(v), want)
		}
	}
}
