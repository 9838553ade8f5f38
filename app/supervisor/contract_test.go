package supervisor

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/lilyformac/lily/engine/lifecycle"
	"github.com/lilyformac/lily/server"
)

// TestEngineStatusContract reads the real server's /status (with lifecycle.Status, as lily serve
// wires it) and checks every field EngineStatus maps, plus /status/retry and /health.
func TestEngineStatusContract(t *testing.T) {
	retried := false
	st := lifecycle.Status{
		Phase: lifecycle.PhasePull, Progress: 0.25, Detail: "downloading", BytesDone: 5, BytesTotal: 20, File: "model.safetensors",
		BytesPerS: 38e6, ETASeconds: 420,
		Retry: &lifecycle.RetryStatus{Reason: "HTTP 503", Error: "GET x: Service Unavailable (HTTP 503)", Attempt: 1, Attempts: 7, At: time.Now(), InS: 8},
	}
	srv := server.New(server.Config{
		APIKey: "k",
		Status: func() any { return st },
		Retry:  func() error { retried = true; return nil },
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	p, _ := strconv.Atoi(port)
	o := Options{Host: host, Port: p, APIKey: "k"}

	got, err := fetchStatus(context.Background(), http.DefaultClient, o)
	if err != nil {
		t.Fatal(err)
	}
	want := EngineStatus{Phase: "pull", Progress: 0.25, Detail: "downloading", BytesDone: 5, BytesTotal: 20, File: "model.safetensors",
		BytesPerS: 38e6, ETASeconds: 420, Retry: Retry{Reason: "HTTP 503", Error: "GET x: Service Unavailable (HTTP 503)", InS: 8}}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	st = lifecycle.Status{Phase: lifecycle.PhaseError, FailedPhase: lifecycle.PhaseChecks, Error: "checks: not enough memory"}
	got, _ = fetchStatus(context.Background(), http.DefaultClient, o)
	if got.Phase != "error" || got.FailedPhase != "checks" || got.Error != "checks: not enough memory" {
		t.Fatalf("%+v", got)
	}
	// A just-started engine reports the checks that run before the download (the menu says
	// "Checking this Mac"), not the download.
	st = lifecycle.NewState(io.Discard).Status()
	if got, _ = fetchStatus(context.Background(), http.DefaultClient, o); got.Phase != "checks" || got.BytesTotal != 0 || got.Retry != (Retry{}) || got.ETASeconds != -1 {
		t.Fatalf("a fresh engine's status: %+v", got)
	}
	if err := postRetry(o, time.Second); err != nil || !retried {
		t.Fatalf("retry: %v %v", err, retried)
	}
	o.APIKey = "wrong"
	if _, err := fetchStatus(context.Background(), http.DefaultClient, o); err == nil {
		t.Fatal("a wrong key was accepted")
	}
	if !answersLikeLily(o, time.Second) { // /health needs no key
		t.Fatal("/health not recognised")
	}
}

// TestIdleUnloadContract runs the real server with a 100 ms --idle-unload: /status's
// memory_bytes reaches EngineStatus, the unloaded phase reads as Unloaded, and postLoad is
// answered (POST /status/load) and loads the model again.
func TestIdleUnloadContract(t *testing.T) {
	var srv *server.Server
	model := &server.Model{ID: "m", Context: 4096, Memory: func() int64 { return 21_300_000_000 }}
	srv = server.New(server.Config{IdleUnload: 100 * time.Millisecond,
		Load: func(context.Context) error { srv.SetModel(model); return nil }, Unload: func() {}})
	srv.SetModel(model)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	u, _ := url.Parse(ts.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	p, _ := strconv.Atoi(port)
	o := Options{Host: host, Port: p}
	wait := func(what string, ok func(EngineStatus) bool) EngineStatus {
		for i := 0; i < 200; i++ { // 200 × 10 ms
			if st, err := fetchStatus(context.Background(), http.DefaultClient, o); err == nil && ok(st) {
				return st
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("/status never showed %s", what)
		return EngineStatus{}
	}
	if st := wait("the model", func(st EngineStatus) bool { return st.Phase == "ready" }); st.MemoryBytes != 21_300_000_000 {
		t.Fatalf("ready: %+v", st)
	}
	if st := wait("the unload", EngineStatus.Unloaded); st.MemoryBytes != 0 || st.Detail == "" {
		t.Fatalf("unloaded: %+v", st)
	}
	if err := postLoad(o, time.Second); err != nil {
		t.Fatal(err)
	}
	wait("the model again", func(st EngineStatus) bool { return st.Phase == "ready" && st.MemoryBytes > 0 })
}
