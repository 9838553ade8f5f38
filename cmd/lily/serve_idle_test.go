package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeIdleUnload: `lily serve --demo --idle-unload 300ms` reports its memory when ready,
// releases the model when idle (phase unloaded in /status and the log, memory 0), and the next
// request walks load → warm → ready again and is answered.
func TestServeIdleUnload(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	root := newRootCmd()
	root.SetOut(&log)
	root.SetErr(&log)
	root.SetArgs([]string{"serve", "--demo", "--backend", "cpu", "--port", "0", "--api-key", "", "--idle-unload", "300ms"})
	served := make(chan error, 1)
	go func() { served <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case <-served:
		case <-time.After(shutdownGrace + 5*time.Second):
			t.Error("serve still running after the stop signal")
		}
	}()
	base := waitLog(t, &log, regexp.MustCompile(`ready at (http://\S+)/v1`))
	type status struct {
		Phase, Detail string
		Memory        int64 `json:"memory_bytes"`
	}
	var st status
	for i := 0; i < 200; i++ { // 200 × 25 ms
		getJSON(t, base+"/status", &st)
		if st.Phase == "unloaded" {
			break
		}
		if st.Phase == "ready" && st.Memory <= 0 {
			t.Fatalf("ready with memory_bytes %d", st.Memory)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if st.Phase != "unloaded" || st.Memory != 0 || !strings.Contains(st.Detail, "next request loads it again") {
		t.Fatalf("status after idling: %+v\n%s", st, log.String())
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("request after the unload: %d", resp.StatusCode)
	}
	if got := strings.Join(phaseOrder(log.String()), " "); !strings.HasPrefix(got, "load warm ready unloaded load warm ready") {
		t.Fatalf("phases %q", got)
	}
}

// waitLog waits (60 s at most) for re to match serve's log and returns its first group.
func waitLog(t *testing.T, log *syncBuffer, re *regexp.Regexp) string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(log.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve's log never matched %s:\n%s", re, log.String())
		}
	}
}
