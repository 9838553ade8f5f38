package server

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// send makes one request and returns its status, headers and error code (checking that an
// error status carries a JSON error object).
func send(t *testing.T, method, target, host, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	resp, b := do(t, method, target, host, body, hdr...)
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(b, &e)
	if resp.StatusCode >= 400 && e.Error.Message == "" {
		t.Errorf("%s %s (Host %q): status %d without a JSON error", method, target, host, resp.StatusCode)
	}
	return resp.StatusCode, resp.Header, e.Error.Code
}

// TestForeignHostRefused: a DNS-rebinding page reaches the loopback listener under its own name;
// every endpoint answers 421 for it and nothing runs, while this machine's names pass.
func TestForeignHostRefused(t *testing.T) {
	b := newScripted(t, "ok")
	retried := 0
	_, ts := testServer(t, b, Config{Retry: func() error { retried++; return nil }})
	port := portOf(ts.URL)
	chat := `{"messages":` + userHi + `,"max_tokens":2}`
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", chat}, {"POST", "/v1/completions", `{"prompt":"hi"}`},
		{"GET", "/status", ""}, {"GET", "/v1/models", ""}, {"GET", "/metrics", ""}, {"GET", "/health", ""},
		{"POST", "/status/retry", ""},
	} {
		for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port, "127.0.0.1.nip.io:" + port} {
			code, _, ecode := send(t, r.method, ts.URL+r.path, host, r.body)
			if code != http.StatusMisdirectedRequest || ecode != "host_not_allowed" {
				t.Errorf("%s %s with Host %s: %d %q, want 421 host_not_allowed", r.method, r.path, host, code, ecode)
			}
		}
	}
	if n := b.forwards.Load(); n != 0 || retried != 0 {
		t.Fatalf("refused requests ran: %d forwards, %d retries", n, retried)
	}
	for _, host := range []string{"localhost:" + port, "LOCALHOST.:" + port, "127.0.0.1:" + port, "[::1]:" + port, "localhost"} {
		if code, _, _ := send(t, "POST", ts.URL+"/v1/chat/completions", host, chat); code != 200 {
			t.Errorf("Host %s: %d, want 200", host, code)
		}
	}
}

func TestAllowedHosts(t *testing.T) {
	g := newGuard("127.0.0.1", []string{"lily.lan", ".corp.example"}, nil)
	for host, want := range map[string]bool{
		"lily.lan:8000": true, "LILY.LAN": true, "corp.example": true, "a.b.corp.example:1": true,
		"badcorp.example": false, "lily.lan.evil.example": false, "192.168.1.20:8000": false, "": true,
	} {
		if got := g.hostAllowed(host); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
	if !newGuard("127.0.0.1", []string{"*"}, nil).hostAllowed("anything.example") {
		t.Error(`--allowed-hosts "*" refused a name`)
	}
	// A wildcard bind is also reached at this machine's interface addresses, and only at those.
	old := interfaceAddrs
	t.Cleanup(func() { interfaceAddrs = old })
	interfaceAddrs = func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("192.168.1.20"), Mask: net.CIDRMask(24, 32)}}, nil
	}
	wild := newGuard("0.0.0.0", nil, nil)
	for host, want := range map[string]bool{"192.168.1.20:8000": true, "192.168.1.21:8000": false, "[::1]:8000": true, "evil.example": false} {
		if got := wild.hostAllowed(host); got != want {
			t.Errorf("wildcard bind, Host %q: allowed %v, want %v", host, got, want)
		}
	}
	if newGuard("127.0.0.1", nil, nil).hostAllowed("192.168.1.20") {
		t.Error("a loopback bind accepted a LAN address as its name")
	}
}

// TestCrossOriginRefused: a page on another site gets 403 on every method, with or without a
// preflight, and nothing runs; pages on this machine, --cors origins and desktop web views pass.
func TestCrossOriginRefused(t *testing.T) {
	b := newScripted(t, "ok")
	retried := 0
	_, ts := testServer(t, b, Config{CORSOrigins: []string{"https://app.example", "chrome-extension://*"}, Retry: func() error { retried++; return nil }})
	chat := `{"messages":` + userHi + `,"max_tokens":2}`
	for _, origin := range []string{"https://evil.example", "http://evil.example:" + portOf(ts.URL), "null", "https://app.example.evil.example", "http://localhost.evil.example"} {
		for _, r := range []struct{ method, path, body, ctype string }{
			{"POST", "/v1/chat/completions", chat, "text/plain"}, {"POST", "/v1/chat/completions", chat, "application/json"},
			{"POST", "/status/retry", "", "text/plain"}, {"GET", "/v1/models", "", ""}, {"GET", "/status", "", ""},
			{"OPTIONS", "/v1/chat/completions", "", ""},
		} {
			code, h, ecode := send(t, r.method, ts.URL+r.path, "", r.body, "Origin", origin, "Content-Type", r.ctype, "Access-Control-Request-Method", "POST")
			if code != http.StatusForbidden || ecode != "origin_not_allowed" || h.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s %s from %s: %d %q ACAO %q, want 403 origin_not_allowed", r.method, r.path, origin, code, ecode, h.Get("Access-Control-Allow-Origin"))
			}
		}
	}
	if n := b.forwards.Load(); n != 0 || retried != 0 {
		t.Fatalf("cross-origin requests ran: %d forwards, %d retries", n, retried)
	}
	for _, origin := range []string{"https://app.example", "http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8080", "vscode-webview://abc123", "app://obsidian.md", "chrome-extension://abcdef", "http://" + strings.TrimPrefix(ts.URL, "http://")} {
		code, h, _ := send(t, "POST", ts.URL+"/v1/chat/completions", "", chat, "Origin", origin)
		if code != 200 || h.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("POST from %s: %d, ACAO %q", origin, code, h.Get("Access-Control-Allow-Origin"))
		}
	}
	code, h, _ := send(t, "OPTIONS", ts.URL+"/v1/chat/completions", "", "", "Origin", "http://localhost:5173",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, x-stainless-os", "Access-Control-Request-Private-Network", "true")
	if code != 204 || h.Get("Access-Control-Allow-Headers") != "authorization, x-stainless-os" || h.Get("Access-Control-Allow-Private-Network") != "true" {
		t.Errorf("preflight: %d %v", code, h)
	}
	if code, _, _ := send(t, "POST", ts.URL+"/v1/chat/completions", "", chat); code != 200 {
		t.Errorf("no Origin (curl, SDKs): %d", code)
	}
	any := newGuard("", nil, []string{"*"})
	if !any.originAllowed("https://anything.example", "localhost:8000") {
		t.Error(`--cors "*" refused an origin`)
	}
}

// portOf is the port of a test server's URL.
func portOf(rawURL string) string {
	u, _ := url.Parse(rawURL)
	return u.Port()
}
