package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodPost, url, "", body, append([]string{"Content-Type", "application/json"}, hdr...)...)
}

// do makes one request (host "" keeps the URL's) with header name/value pairs and reads the answer.
func do(t *testing.T, method, url, host, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

type chatResp struct {
	Choices []struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent string  `json:"reasoning_content"`
			Reasoning        string  `json:"reasoning"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
		Logprobs     *struct {
			Content []struct {
				Token       string                   `json:"token"`
				Logprob     float64                  `json:"logprob"`
				Bytes       []int                    `json:"bytes"`
				TopLogprobs []struct{ Token string } `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// sseEvents reads a streamed response: data payloads in order, and the comment lines seen.
func sseEvents(t *testing.T, r io.Reader) (data []string, comments []string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, ":"):
			comments = append(comments, line)
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return
}

const userHi = `[{"role":"user","content":"What is the weather in Paris?"}]`

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}]`

func TestReasoningAndContent(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Let me think.\n</think>\n\nIt is sunny."), Config{})
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"model":"anything","messages":`+userHi+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var r chatResp
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	c := r.Choices[0]
	if c.Message.Content == nil || *c.Message.Content != "It is sunny." || c.Message.ReasoningContent != "Let me think.\n" || c.Message.Reasoning != c.Message.ReasoningContent {
		t.Fatalf("message %+v", c.Message)
	}
	if c.FinishReason != "stop" || r.Model != "test-model" {
		t.Fatalf("finish %q model %q", c.FinishReason, r.Model)
	}
	if r.Usage.PromptTokens == 0 || r.Usage.CompletionTokens == 0 || r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
		t.Fatalf("usage %+v", r.Usage)
	}
}

// TestStreamFormat checks OpenAI's chunk sequence and that streamed text equals the one-shot answer.
func TestStreamFormat(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Hmm, weather.\n</think>\n\nSunny, 21°C — enjoy!"), Config{})
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"stream":true,"stream_options":{"include_usage":true}}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	data, _ := sseEvents(t, strings.NewReader(string(body)))
	if data[len(data)-1] != "[DONE]" {
		t.Fatalf("last event %q", data[len(data)-1])
	}
	var content, reasoning strings.Builder
	var finish string
	for i, d := range data[:len(data)-1] {
		var ch struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Choices []struct {
				Delta        map[string]any `json:"delta"`
				FinishReason *string        `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(d), &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Object != "chat.completion.chunk" || !strings.HasPrefix(ch.ID, "chatcmpl-") {
			t.Fatalf("chunk %d: %s", i, d)
		}
		if i == 0 && ch.Choices[0].Delta["role"] != "assistant" {
			t.Fatalf("first chunk has no role: %s", d)
		}
		if i == len(data)-2 {
			if len(ch.Choices) != 0 || ch.Usage == nil || ch.Usage.CompletionTokens == 0 {
				t.Fatalf("usage chunk: %s", d)
			}
			continue
		}
		if s, ok := ch.Choices[0].Delta["content"].(string); ok {
			content.WriteString(s)
		}
		if s, ok := ch.Choices[0].Delta["reasoning_content"].(string); ok {
			reasoning.WriteString(s)
		}
		if f := ch.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	if content.String() != "Sunny, 21°C — enjoy!" || reasoning.String() != "Hmm, weather.\n" || finish != "stop" {
		t.Fatalf("content %q reasoning %q finish %q", content.String(), reasoning.String(), finish)
	}
}

func TestToolCalls(t *testing.T) {
	script := "I should call the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	_, ts := testServer(t, newScripted(t, script), Config{})
	req := `{"messages":` + userHi + `,"tools":` + weatherTools + `}`
	_, body := post(t, ts.URL+"/v1/chat/completions", req)
	var r chatResp
	json.Unmarshal(body, &r)
	c := r.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
		t.Fatalf("response %s", body)
	}
	tc := c.Message.ToolCalls[0]
	if tc.Type != "function" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city": "Paris", "days": 3}` || !strings.HasPrefix(tc.ID, "call_") {
		t.Fatalf("tool call %+v", tc)
	}
	// Streamed: every tool-call delta carries index; the first carries id, type and name.
	_, body = post(t, ts.URL+"/v1/chat/completions", strings.TrimSuffix(req, "}")+`,"stream":true}`)
	data, _ := sseEvents(t, strings.NewReader(string(body)))
	var args strings.Builder
	sawName, finish := false, ""
	for _, d := range data[:len(data)-1] {
		var ch struct {
			Choices []struct {
				Delta struct {
					ToolCalls []map[string]any `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		json.Unmarshal([]byte(d), &ch)
		if f := ch.Choices[0].FinishReason; f != nil {
			finish = *f
		}
		for _, call := range ch.Choices[0].Delta.ToolCalls {
			if _, ok := call["index"]; !ok {
				t.Fatalf("tool-call delta without index: %s", d)
			}
			fn := call["function"].(map[string]any)
			if name, ok := fn["name"]; ok {
				sawName = name == "get_weather" && call["id"] != nil && call["type"] == "function"
			}
			args.WriteString(fn["arguments"].(string))
		}
	}
	if !sawName || args.String() != tc.Function.Arguments || finish != "tool_calls" {
		t.Fatalf("streamed: name %v args %q finish %q", sawName, args.String(), finish)
	}
}

func TestForcedToolChoice(t *testing.T) {
	// The script continues after the forced opening `<tool_call>\n<function=get_weather>\n`.
	b := newScripted(t, "<parameter=city>\nLyon\n</parameter>\n</function>\n</tool_call>")
	_, ts := testServer(t, b, Config{})
	_, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"tools":`+weatherTools+`,"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`)
	var r chatResp
	json.Unmarshal(body, &r)
	if len(r.Choices) == 0 || len(r.Choices[0].Message.ToolCalls) != 1 || r.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"city": "Lyon"}` {
		t.Fatalf("forced call: %s", body)
	}
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"tools":`+weatherTools+`,"tool_choice":{"type":"function","function":{"name":"nope"}}}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "not in tools") {
		t.Fatalf("unknown forced tool: %d %s", resp.StatusCode, body)
	}
}

// TestStopNeverHalfStreamed: no chunk ever contains part of a stop string.
func TestStopNeverHalfStreamed(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "alpha beta END gamma"), Config{})
	base := `{"messages":` + userHi + `,"chat_template_kwargs":{"enable_thinking":false},"stop":["END"]`
	_, body := post(t, ts.URL+"/v1/chat/completions", base+`}`)
	var r chatResp
	json.Unmarshal(body, &r)
	if got := *r.Choices[0].Message.Content; got != "alpha beta " || r.Choices[0].FinishReason != "stop" {
		t.Fatalf("content %q finish %q", got, r.Choices[0].FinishReason)
	}
	_, body = post(t, ts.URL+"/v1/chat/completions", base+`,"stream":true}`)
	if strings.Contains(string(body), "EN") || strings.Contains(string(body), "gamma") {
		t.Fatalf("stop string leaked into the stream: %s", body)
	}
}

func TestLogprobs(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "ok"), Config{})
	_, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"logprobs":true,"top_logprobs":2,"chat_template_kwargs":{"enable_thinking":false}}`)
	var r chatResp
	json.Unmarshal(body, &r)
	lp := r.Choices[0].Logprobs
	if lp == nil || len(lp.Content) == 0 || lp.Content[0].Token != "ok" || len(lp.Content[0].TopLogprobs) != 2 || lp.Content[0].Logprob > 0 || len(lp.Content[0].Bytes) != 2 {
		t.Fatalf("logprobs: %s", body)
	}
}

func TestPrefixCacheReported(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "done"), Config{})
	req := `{"messages":` + userHi + `,"chat_template_kwargs":{"enable_thinking":false}}`
	post(t, ts.URL+"/v1/chat/completions", req)
	_, body := post(t, ts.URL+"/v1/chat/completions", req)
	var r chatResp
	json.Unmarshal(body, &r)
	if r.Usage.PromptTokensDetails.CachedTokens != r.Usage.PromptTokens {
		t.Fatalf("repeat request: cached %d of %d", r.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens)
	}
}

func TestErrors(t *testing.T) {
	b := newScripted(t, "x")
	b.cfg.MaxPositions = 40
	_, ts := testServer(t, b, Config{MaxBodyBytes: 4096})
	long := strings.Repeat("word ", 100)
	cases := []struct {
		body   string
		status int
		want   string
	}{
		{`{"messages": [`, 400, "invalid JSON"},
		{`{"messages": []}`, 400, "non-empty"},
		{`{"messages":` + userHi + `,"n":2}`, 400, "n must be 1"},
		{`{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`, 400, "not supported"},
		{`{"messages":` + userHi + `,"response_format":{"type":"json_schema"}}`, 400, "json_schema"},
		{`{"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "context_length_exceeded"},
		{`{"messages":[{"role":"assistant","content":"hi"}]}`, 400, "No user query"},
		{`{"messages":` + userHi + `,"temperature":5}`, 400, "temperature"},
		{`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","reasoning_content":5},{"role":"user","content":"c"}]}`, 400, "messages[1].reasoning_content must be a string"},
		{`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","reasoning":{"x":1}}]}`, 400, "messages[1].reasoning must be a string"},
		{`{"messages":[{"role":"tool","content":"a","tool_call_id":7}]}`, 400, "messages[0].tool_call_id must be a string"},
		{`{"messages":` + userHi + `,"stop":{"a":1}}`, 400, "stop"},
		{`{"messages":` + userHi + `,"reasoning_effort":"extreme"}`, 400, "reasoning_effort"},
		{`{"messages":` + userHi + `,"pad":"` + strings.Repeat("z", 5000) + `"}`, 413, "too large"},
	}
	for _, c := range cases {
		resp, body := post(t, ts.URL+"/v1/chat/completions", c.body)
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.want) {
			t.Errorf("%.60s…: got %d %s, want %d containing %q", c.body, resp.StatusCode, body, c.status, c.want)
			continue
		}
		var e struct {
			Error struct {
				Message, Type string
			} `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("not an OpenAI error object: %s", body)
		}
	}
	resp, _ := http.Get(ts.URL + "/v1/nothing")
	if resp.StatusCode != 404 {
		t.Errorf("unknown route: %d", resp.StatusCode)
	}
}

func TestAPIKeyAndCORS(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "x"), Config{APIKey: "sekret", CORSOrigins: []string{"https://app.example"}})
	resp, _ := http.Get(ts.URL + "/v1/models")
	if resp.StatusCode != 401 {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sekret")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 200 {
		t.Fatalf("good key: %d", resp.StatusCode)
	}
	resp, _ = http.Get(ts.URL + "/health")
	if resp.StatusCode != 200 {
		t.Fatalf("health needs no key: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("OPTIONS", ts.URL+"/v1/chat/completions", nil)
	req.Header.Set("Origin", "https://app.example")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	req.Header.Set("Origin", "https://evil.example")
	resp, _ = http.DefaultClient.Do(req)
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS allowed an unlisted origin")
	}
}

func TestModelsAndMetrics(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "x"), Config{})
	resp, _ := http.Get(ts.URL + "/v1/models")
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int    `json:"context_length"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	if len(list.Data) != 1 || list.Data[0].ContextLength != 4096 {
		t.Fatalf("models %+v", list)
	}
	post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`}`)
	resp, _ = http.Get(ts.URL + "/metrics")
	b, _ := io.ReadAll(resp.Body)
	for _, m := range []string{"lily_queue_depth", "lily_time_to_first_token_seconds_count 1", "lily_generated_tokens_total", "lily_prefix_cache_misses_total 1", `lily_requests_total{endpoint="/v1/chat/completions",status="200"} 1`} {
		if !strings.Contains(string(b), m) {
			t.Errorf("metrics lack %q", m)
		}
	}
}

func TestCompletions(t *testing.T) {
	_, ts := testServer(t, newScripted(t, " world, hello"), Config{})
	_, body := post(t, ts.URL+"/v1/completions", `{"prompt":"Hello","max_tokens":50,"logprobs":1}`)
	var r struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
			Logprobs     struct {
				Tokens []string `json:"tokens"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	json.Unmarshal(body, &r)
	if r.Object != "text_completion" || r.Choices[0].Text != " world, hello" || r.Choices[0].FinishReason != "stop" || strings.Join(r.Choices[0].Logprobs.Tokens, "") != " world, hello" {
		t.Fatalf("completion: %s", body)
	}
	_, body = post(t, ts.URL+"/v1/completions", `{"prompt":"Hello","stream":true,"max_tokens":2}`)
	data, _ := sseEvents(t, strings.NewReader(string(body)))
	if data[len(data)-1] != "[DONE]" || !strings.Contains(string(body), `"finish_reason":"length"`) {
		t.Fatalf("stream: %s", body)
	}
}

// TestKeepAliveDuringSlowPrefill: comments flow while the first token is far away.
func TestKeepAliveDuringSlowPrefill(t *testing.T) {
	b := newScripted(t, "x")
	b.delay = 150 * time.Millisecond
	_, ts := testServer(t, b, Config{KeepAlive: 40 * time.Millisecond})
	_, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"stream":true,"max_tokens":2}`)
	_, comments := sseEvents(t, strings.NewReader(string(body)))
	if len(comments) == 0 || comments[0] != ": keep-alive" {
		t.Fatalf("no keep-alive comments: %s", body)
	}
}

// TestDisconnectFreesSlot: a client that goes away mid-stream stops its generation within a
// token or so, and the next request runs.
func TestDisconnectFreesSlot(t *testing.T) {
	b := newScripted(t, strings.Repeat("tick ", 500))
	b.delay = 5 * time.Millisecond
	s, ts := testServer(t, b, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(`{"messages":`+userHi+`,"stream":true,"max_tokens":1000}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 6 { // a few chunks
		br.ReadString('\n')
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for s.sched.depth() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	n := b.forwards.Load()
	time.Sleep(100 * time.Millisecond)
	if s.sched.depth() != 0 || b.forwards.Load() != n {
		t.Fatalf("generation still running after disconnect (depth %d, forwards %d → %d)", s.sched.depth(), n, b.forwards.Load())
	}
	if n > 200 {
		t.Fatalf("%d forwards: generation did not stop soon after the disconnect", n)
	}
	r, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":3}`)
	if r.StatusCode != 200 {
		t.Fatalf("next request: %d %s", r.StatusCode, body)
	}
}

func TestQueueFullIs429(t *testing.T) {
	b := newScripted(t, "x y z")
	b.gate = make(chan struct{})
	s, ts := testServer(t, b, Config{QueueLimit: 1})
	results := make(chan int, 3)
	for range 2 {
		go func() {
			resp, _ := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":2}`)
			results <- resp.StatusCode
		}()
	}
	for s.sched.depth() < 2 {
		time.Sleep(2 * time.Millisecond)
	}
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":2}`)
	if resp.StatusCode != 429 || !strings.Contains(string(body), "rate_limit_error") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d %s (Retry-After %q)", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	close(b.gate)
	for range 2 {
		if code := <-results; code != 200 {
			t.Fatalf("queued request got %d", code)
		}
	}
}
