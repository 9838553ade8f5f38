package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The fake engine is this test binary run again with LILY_FAKE_ENGINE=1 (see TestMain). It
// accepts `serve --host H --port P [--model DIR]` like lily serve and is steered by variables:
//
//	FAKE_STEP=20ms         time per startup phase (checks, pull, verify, checks, load, warm)
//	FAKE_FAIL=load         fail in that phase, the first time it runs (then phase "error", failed_phase "load")
//	FAKE_FAIL_TIMES=1      how many startups fail before POST /status/retry succeeds
//	FAKE_CRASH_AFTER=50ms  exit with status 2 and a panic line after that long
//	FAKE_IGNORE_TERM=1     ignore SIGTERM (the supervisor must SIGKILL)
//	FAKE_HANG=1            accept connections but never answer /status
//	FAKE_REFUSE_RETRY=1    answer POST /status/retry with 409 and an error message
//	FAKE_BAD_OPTIONS=msg   exit 1 at once with "lily: msg", as lily serve does for bad flags
//
// With --idle-unload D it reports phase unloaded D after it is ready, and POST /status/load
// makes it ready again (memory_bytes: 21.3 GB while ready, 0 while unloaded).
//
// With --exit-with-parent it behaves as lily serve: it refuses a stdin that is not a pipe and shuts
// down when stdin reaches end of file. POST /fake/crash makes it exit at once (status 3); GET
// /fake/polls counts the /status requests so far; LILY_API_KEY guards /status as in lily.
func fakeEngineMain() {
	args := os.Args[1:]
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "lily: expected the serve command")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "")
	port := fs.Int("port", 8000, "")
	model := fs.String("model", "", "")
	exitWithParent := fs.Bool("exit-with-parent", false, "")
	idleUnload := fs.Duration("idle-unload", 0, "")
	if err := fs.Parse(args[1:]); err != nil {
		os.Exit(2)
	}
	if msg := os.Getenv("FAKE_BAD_OPTIONS"); msg != "" {
		fmt.Fprintln(os.Stderr, "lily:", msg)
		os.Exit(1)
	}
	parentGone := make(chan struct{})
	if *exitWithParent {
		if fi, err := os.Stdin.Stat(); err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
			fmt.Fprintln(os.Stderr, "lily: --exit-with-parent needs standard input to be a pipe")
			os.Exit(1)
		}
		go func() {
			io.Copy(io.Discard, os.Stdin)
			close(parentGone)
		}()
	}
	step := envDuration("FAKE_STEP", 20*time.Millisecond)
	ignoreTerm := os.Getenv("FAKE_IGNORE_TERM") == "1"
	if ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(os.Stderr, "lily: port %d is already in use: stop the other server or pass --port\n", *port)
		} else {
			fmt.Fprintln(os.Stderr, "lily:", err)
		}
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "lily: listening at http://%s/v1 (status at /status)\n", ln.Addr())

	e := &fakeEngine{key: os.Getenv("LILY_API_KEY"), step: step, fail: os.Getenv("FAKE_FAIL"), model: "fake-qwen", idle: *idleUnload}
	if *model != "" {
		e.model = *model
	}
	e.failTimes, _ = strconv.Atoi(os.Getenv("FAKE_FAIL_TIMES"))
	if e.failTimes == 0 {
		e.failTimes = 1
	}
	hang := os.Getenv("FAKE_HANG") == "1"
	var polls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fake/polls", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, polls.Load()) })
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { // as lily serve answers before it is ready
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]any{"status": "loading", "error": map[string]string{"message": "the model is not ready yet"}})
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		if hang {
			<-r.Context().Done()
			return
		}
		if !e.authorized(w, r) {
			return
		}
		json.NewEncoder(w).Encode(e.status())
	})
	mux.HandleFunc("POST /status/retry", func(w http.ResponseWriter, r *http.Request) {
		if !e.authorized(w, r) {
			return
		}
		if os.Getenv("FAKE_REFUSE_RETRY") == "1" {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"error":{"message":"the disk is full"}}`)
			return
		}
		if e.status().Phase != "error" {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"error":{"message":"nothing to retry"}}`)
			return
		}
		go e.walk()
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /status/load", func(w http.ResponseWriter, r *http.Request) {
		if e.authorized(w, r) {
			e.ready()
			w.WriteHeader(http.StatusAccepted)
		}
	})
	mux.HandleFunc("POST /fake/crash", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(os.Stderr, "panic: fake crash on request")
		os.Exit(3)
	})
	go e.walk()
	if d := envDuration("FAKE_CRASH_AFTER", 0); d > 0 {
		time.AfterFunc(d, func() {
			fmt.Fprintf(os.Stderr, "panic: fake crash after %s\n", d)
			os.Exit(2)
		})
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	if ignoreTerm {
		for {
			time.Sleep(time.Hour)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	select {
	case <-ctx.Done():
	case <-parentGone:
		fmt.Fprintln(os.Stderr, "lily: the program that started serve has ended")
	}
	shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	fmt.Fprintln(os.Stderr, "lily: stopped")
	os.Exit(0)
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

type fakeEngine struct {
	key, fail, model string
	step             time.Duration
	failTimes        int
	idle             time.Duration // --idle-unload

	mu       sync.Mutex
	st       EngineStatus
	failures int
}

func (e *fakeEngine) authorized(w http.ResponseWriter, r *http.Request) bool {
	if e.key != "" && r.Header.Get("Authorization") != "Bearer "+e.key {
		w.WriteHeader(http.StatusUnauthorized)
		return false
	}
	return true
}

func (e *fakeEngine) status() EngineStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st
}

func (e *fakeEngine) set(st EngineStatus) {
	e.mu.Lock()
	e.st = st
	e.mu.Unlock()
}

// walk runs the startup phases in lily serve's order (cmd/lily startupSteps: the checks that
// need no weights before the pull, all of them after verify), each in four progress steps,
// failing where told.
func (e *fakeEngine) walk() {
	for _, ph := range []string{"checks", "pull", "verify", "checks", "load", "warm"} {
		for i := 0; i <= 4; i++ {
			st := EngineStatus{Phase: ph, Progress: float64(i) / 4}
			if ph == "pull" {
				st.BytesTotal, st.BytesDone, st.File = 4000, int64(i)*1000, "model.safetensors"
			}
			e.set(st)
			time.Sleep(e.step / 4)
		}
		e.mu.Lock()
		failNow := ph == e.fail && e.failures < e.failTimes
		if failNow {
			e.failures++
		}
		e.mu.Unlock()
		if failNow {
			e.set(EngineStatus{Phase: "error", FailedPhase: ph, Error: ph + ": fake failure"})
			return
		}
	}
	e.ready()
}

// ready serves the model, and with --idle-unload releases it after that long.
func (e *fakeEngine) ready() {
	e.set(EngineStatus{Phase: "ready", Progress: 1, Model: e.model, ContextLength: 4096, DecodeTokensPerS: 42.5, MemoryBytes: 21_300_000_000})
	if e.idle > 0 {
		time.AfterFunc(e.idle, func() { e.set(EngineStatus{Phase: "unloaded", Model: e.model, ContextLength: 4096}) })
	}
}
