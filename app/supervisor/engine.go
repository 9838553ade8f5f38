package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EngineStatus is the engine's GET /status answer.
type EngineStatus struct {
	Phase            string  `json:"phase"` // checks, pull, verify, checks again, load, warm, then ready or error; unloaded when idle
	Progress         float64 `json:"progress"`
	Detail           string  `json:"detail"`
	Error            string  `json:"error"`
	FailedPhase      string  `json:"failed_phase"`
	BytesDone        int64   `json:"bytes_done"`
	BytesTotal       int64   `json:"bytes_total"`
	File             string  `json:"file"`
	BytesPerS        float64 `json:"bytes_per_s"` // over the engine's last 15 s
	ETASeconds       int64   `json:"eta_s"`       // at that rate; -1: unknown
	Retry            Retry   `json:"retry"`       // the stalled download's next attempt (zero: none)
	Model            string  `json:"model"`
	ContextLength    int     `json:"context_length"`
	DecodeTokensPerS float64 `json:"decode_tokens_per_s"`
	QueueDepth       int     `json:"queue_depth"`
	MemoryBytes      int64   `json:"memory_bytes"` // what the engine holds for the model (0: unloaded, or unknown)
}

// Unloaded reports an engine that released its model for being idle (serve --idle-unload): it
// serves, and the next request loads the model again.
func (e EngineStatus) Unloaded() bool { return e.Phase == "unloaded" }

// Retry is a download retry the engine waits for while no byte arrives (/status "retry"; null
// leaves it zero).
type Retry struct {
	Reason string  `json:"reason"` // "HTTP 503", "no data", "connection refused"
	Error  string  `json:"error"`
	InS    float64 `json:"in_s"` // seconds to the next attempt when the engine answered
}

func authorize(req *http.Request, key string) {
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
}

// fetchStatus reads GET /status.
func fetchStatus(ctx context.Context, client *http.Client, o Options) (EngineStatus, error) {
	var st EngineStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.RootURL()+"/status", nil)
	if err != nil {
		return st, err
	}
	authorize(req, o.APIKey)
	resp, err := client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode == http.StatusUnauthorized {
			return st, errors.New("/status: 401: the engine wants a different API key")
		}
		return st, fmt.Errorf("/status: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
	return st, err
}

// postRetry asks the engine to re-run its failed startup (POST /status/retry).
func postRetry(o Options, timeout time.Duration) error {
	return postStatus(o, "/status/retry", timeout)
}

// postLoad asks the engine to load its model, unloaded for being idle (POST /status/load).
func postLoad(o Options, timeout time.Duration) error { return postStatus(o, "/status/load", timeout) }

// postStatus POSTs to one of the engine's /status actions; an error answer is its message.
func postStatus(o Options, path string, timeout time.Duration) error {
	req, err := http.NewRequest(http.MethodPost, o.RootURL()+path, nil)
	if err != nil {
		return err
	}
	authorize(req, o.APIKey)
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
	if e.Error.Message != "" {
		return errors.New(e.Error.Message)
	}
	return fmt.Errorf("HTTP %d", resp.StatusCode)
}

// answersLikeLily reports whether the port answers GET /health the way lily serve does: 200
// {"status":"ok"} when ready, 503 with status loading or error before.
func answersLikeLily(o Options, timeout time.Duration) bool {
	resp, err := (&http.Client{Timeout: timeout}).Get(o.RootURL() + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Status string `json:"status"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<12)).Decode(&h) != nil {
		return false
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return h.Status == "ok"
	case http.StatusServiceUnavailable:
		return h.Status == "loading" || h.Status == "error" || h.Status == "shutting_down"
	}
	return false
}

// ErrPortInUse is CheckPort's answer for a taken port.
var ErrPortInUse = errors.New("port in use")

// CheckPort reports whether the engine could listen on host:port: nil when free, ErrPortInUse
// when something listens there already (on that address or a wildcard one), or the bind error.
func CheckPort(host string, port int) error {
	o := Options{Host: host, Port: port}
	addr := net.JoinHostPort(o.clientHost(), strconv.Itoa(port))
	if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
		c.Close()
		return ErrPortInUse
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return ErrPortInUse
		}
		return err
	}
	return ln.Close()
}

// portInUseLine matches the engine's (and Go's) message for a taken port.
func portInUseLine(line string) bool {
	l := strings.ToLower(line)
	return strings.Contains(l, "already in use") || strings.Contains(l, "eaddrinuse")
}
