package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHealthUntilReady: /health is 503 {"status":"loading", "error":{…}} with Retry-After until a
// model is served (as llama-server answers), "error" once the startup failed, 200 after; the API
// answers 503 with Retry-After meanwhile, /status stays 200 for the app.
func TestHealthUntilReady(t *testing.T) {
	status := map[string]string{"phase": "load", "error": ""}
	var mu sync.Mutex
	s := New(Config{Status: func() any { mu.Lock(); defer mu.Unlock(); return status }})
	url := newHTTPTest(t, s)
	health := func() (int, string, string, http.Header) {
		resp, err := http.Get(url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct {
			Status string `json:"status"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&h)
		msg := ""
		if h.Error != nil {
			msg = h.Error.Message
		}
		return resp.StatusCode, h.Status, msg, resp.Header
	}
	if code, st, msg, h := health(); code != 503 || st != "loading" || !strings.Contains(msg, "phase load") || h.Get("Retry-After") == "" {
		t.Fatalf("loading: %d %q %q Retry-After %q", code, st, msg, h.Get("Retry-After"))
	}
	for _, r := range []struct{ method, path string }{{"GET", "/v1/models"}, {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}} {
		code, h, ecode := send(t, r.method, url+r.path, "", `{"messages":`+userHi+`}`)
		if code != 503 || ecode != "model_not_ready" || h.Get("Retry-After") == "" {
			t.Errorf("%s %s while loading: %d %q Retry-After %q", r.method, r.path, code, ecode, h.Get("Retry-After"))
		}
	}
	if code, _, _ := send(t, "GET", url+"/status", "", ""); code != 200 {
		t.Errorf("/status while loading: %d", code)
	}
	mu.Lock()
	status = map[string]string{"phase": "error", "error": "load: tokenizer.json: no such file"}
	mu.Unlock()
	if code, st, msg, _ := health(); code != 503 || st != "error" || !strings.Contains(msg, "tokenizer.json") {
		t.Fatalf("failed startup: %d %q %q", code, st, msg)
	}
	_, ts := testServer(t, newScripted(t, "ok"), Config{})
	resp, _ := http.Get(ts.URL + "/health")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"status":"ok"}` {
		t.Fatalf("ready: %d %s", resp.StatusCode, b)
	}
}

func TestBearerSchemeAnyCase(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "x"), Config{APIKey: "sekret"})
	for hdr, want := range map[string]int{
		"Bearer sekret": 200, "bearer sekret": 200, "BEARER  sekret ": 200, "Basic sekret": 401, "sekret": 401, "Bearer wrong": 401,
	} {
		if code, _, _ := send(t, "GET", ts.URL+"/v1/models", "", "", "Authorization", hdr); code != want {
			t.Errorf("Authorization %q: %d, want %d", hdr, code, want)
		}
	}
	if code, _, _ := send(t, "GET", ts.URL+"/v1/models", "", "", "x-api-key", "sekret"); code != 200 {
		t.Errorf("x-api-key: %d", code)
	}
}

// TestSilentlyAcceptedValuesRejected: values that used to be dropped without a word get a 400
// naming the field.
func TestSilentlyAcceptedValuesRejected(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "x"), Config{})
	for _, c := range []struct{ body, param string }{
		{`{"messages":` + userHi + `,"response_format":{"type":"xml"}}`, "response_format.type"},
		{`{"messages":` + userHi + `,"response_format":{}}`, "response_format.type"},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":42}]}]}`, "messages[0].content[0].text"},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":{"x":1}}]}]}`, "messages[0].content[1].text"},
		{`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text"},
		{`{"messages":` + userHi + `} trailing`, ""},
		{`{"messages":` + userHi + `}{"messages":[]}`, ""},
	} {
		resp, body := post(t, ts.URL+"/v1/chat/completions", c.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		json.Unmarshal(body, &e)
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if resp.StatusCode != 400 || param != c.param || e.Error.Message == "" {
			t.Errorf("%.70s: %d param %q %s", c.body, resp.StatusCode, param, body)
		}
	}
	for _, ok := range []string{
		`{"messages":` + userHi + `,"response_format":{"type":"json_object"},"max_tokens":40}` + "\n\t ",
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"response_format":{"type":"text"},"max_tokens":2}`,
	} {
		if resp, body := post(t, ts.URL+"/v1/chat/completions", ok); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", ok, resp.StatusCode, body)
		}
	}
	if resp, body := post(t, ts.URL+"/v1/completions", `{"prompt":"hi"} x`); resp.StatusCode != 400 {
		t.Errorf("completions with trailing data: %d %s", resp.StatusCode, body)
	}
}

// TestDrainEndsOpenRequests: a shutdown ends each open stream with an error event and [DONE],
// answers a waiting plain request 503, and refuses new work, within moments.
func TestDrainEndsOpenRequests(t *testing.T) {
	b := newScripted(t, strings.Repeat("tick ", 2000))
	b.delay = 2 * time.Millisecond
	s, ts := testServer(t, b, Config{QueueLimit: 4})
	streamed := make(chan []string, 1)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":`+userHi+`,"stream":true,"max_tokens":3000}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	br.ReadString('\n') // the stream has started
	go func() {
		data, _ := sseEvents(t, br)
		streamed <- data
	}()
	plain := make(chan string, 1)
	go func() { // queued behind the stream
		r, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":5}`)
		plain <- http.StatusText(r.StatusCode) + " " + string(body)
	}()
	for s.sched.depth() < 2 {
		time.Sleep(2 * time.Millisecond)
	}
	start := time.Now()
	s.Drain()
	var data []string
	select {
	case data = <-streamed:
	case <-time.After(3 * time.Second):
		t.Fatal("the stream was still open 3 s after Drain")
	}
	if len(data) < 2 || data[len(data)-1] != "[DONE]" || !strings.Contains(data[len(data)-2], "shutting_down") {
		t.Fatalf("stream end after Drain: %q", data[max(0, len(data)-2):])
	}
	if p := <-plain; !strings.HasPrefix(p, "Service Unavailable") || !strings.Contains(p, "shutting_down") {
		t.Fatalf("queued plain request: %s", p)
	}
	t.Logf("open requests ended %v after Drain", time.Since(start))
	if code, _, ecode := send(t, "POST", ts.URL+"/v1/chat/completions", "", `{"messages":`+userHi+`}`); code != 503 || ecode != "shutting_down" {
		t.Fatalf("new request after Drain: %d %q", code, ecode)
	}
	if code, _, _ := send(t, "GET", ts.URL+"/health", "", ""); code != 503 {
		t.Fatalf("/health after Drain: %d", code)
	}
}
