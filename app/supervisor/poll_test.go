package supervisor

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPollEvery(t *testing.T) {
	fast, idle := 500*time.Millisecond, 5*time.Second
	for _, tc := range []struct {
		st   State
		open bool
		want time.Duration
	}{
		{Ready, false, idle}, // serving, nobody looking: slow
		{Ready, true, fast},  // the menu shows the numbers
		{Starting, false, fast},
		{Loading, false, fast}, // the download's progress
		{EngineError, false, fast},
		{Stopping, false, fast},
	} {
		if got := PollEvery(tc.st, tc.open, fast, idle); got != tc.want {
			t.Errorf("%s, menu open %v: %s, want %s", tc.st, tc.open, got, tc.want)
		}
	}
	if got := PollEvery(Ready, false, time.Second, 10*time.Millisecond); got != time.Second {
		t.Errorf("an idle interval below the fast one: %s, want the fast one", got)
	}
}

// polls reads the fake engine's count of /status requests.
func (h *harness) polls() int {
	h.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/fake/polls", h.port))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		h.t.Fatalf("/fake/polls: %q", b)
	}
	return n
}

// TestReadyEngineIsPolledSlowlyUntilTheMenuOpens: once Ready with the menu closed the supervisor
// reads /status at IdlePoll (here an hour: at most the one read in flight in 400 ms), opening the
// menu reads it at once and then every PollInterval, and closing it slows down again.
func TestReadyEngineIsPolledSlowlyUntilTheMenuOpens(t *testing.T) {
	h := newHarness(t, []string{"FAKE_STEP=4ms"}, func(c *Config) { c.IdlePoll = time.Hour })
	h.sup.Start()
	h.waitState(Ready)
	time.Sleep(50 * time.Millisecond) // the read that found Ready has returned
	before := h.polls()
	time.Sleep(400 * time.Millisecond)
	if n := h.polls() - before; n > 1 {
		t.Fatalf("%d /status reads in 400 ms while Ready and the menu is closed, want at most 1", n)
	}
	h.sup.SetMenuOpen(true)
	before = h.polls()
	time.Sleep(400 * time.Millisecond) // 10 ms polls: dozens, even on a busy machine some
	if n := h.polls() - before; n < 5 {
		t.Fatalf("%d /status reads in 400 ms with the menu open, want at least 5", n)
	}
	h.sup.SetMenuOpen(false)
	time.Sleep(50 * time.Millisecond) // the poll in flight returns
	before = h.polls()
	time.Sleep(400 * time.Millisecond)
	if n := h.polls() - before; n > 1 {
		t.Fatalf("%d /status reads in 400 ms after the menu closed, want at most 1", n)
	}
}

// fakeAppMain is the menu-bar app as far as the engine can tell, run by TestEngineEndsWhenTheAppDies:
// a supervisor that starts the fake engine on LILY_FAKE_APP's port and prints its pid once Ready.
// It exits by itself after a minute, so a failed test leaves nothing running.
func fakeAppMain() {
	port, _ := strconv.Atoi(os.Getenv("LILY_FAKE_APP"))
	ready := make(chan int, 1)
	New(Config{
		Engine:  os.Args[0],
		Options: Options{Host: "127.0.0.1", Port: port},
		Env:     []string{"LILY_FAKE_ENGINE=1", "LILY_FAKE_APP=", "FAKE_STEP=4ms"},
		OnChange: func(s Snapshot) {
			if s.State == Ready {
				select {
				case ready <- s.PID:
				default:
				}
			}
		},
	}).Start()
	select {
	case pid := <-ready:
		fmt.Println(pid)
	case <-time.After(30 * time.Second):
	}
	time.Sleep(time.Minute)
	os.Exit(1)
}

// gone reports whether pid has exited: no such process, or a zombie nobody has reaped yet (the
// engine's parent is gone; in a container nothing may reap it).
func gone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// TestEngineEndsWhenTheAppDies: an app killed with SIGKILL (as a crash: no Quit, no SIGTERM to
// the engine) leaves no engine behind: the engine sees its stdin pipe close, frees the port and
// exits within a few seconds.
func TestEngineEndsWhenTheAppDies(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to tell an exited, unreaped engine")
	}
	port := freePort(t)
	app := exec.Command(os.Args[0], "-test.run=^$")
	app.Env = append(os.Environ(), "LILY_FAKE_APP="+strconv.Itoa(port))
	stdout, err := app.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Process.Kill(); app.Wait() })
	pids := make(chan int, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		pid, _ := strconv.Atoi(strings.TrimSpace(line))
		pids <- pid
	}()
	var pid int
	select {
	case pid = <-pids:
	case <-time.After(20 * time.Second):
		t.Fatal("the fake app's engine never became ready")
	}
	if pid <= 1 || gone(pid) {
		t.Fatalf("engine pid %d is not running", pid)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	app.Process.Kill() // the app crashes
	app.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !gone(pid) || CheckPort("127.0.0.1", port) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the app died the engine (pid %d) still runs (gone %v) or holds port %d", pid, gone(pid), port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
