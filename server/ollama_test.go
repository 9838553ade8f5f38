package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// ollamaPartResp is one line of an Ollama answer (or the whole answer).
type ollamaPartResp struct {
	Model     string `json:"model"`
	CreatedAt string `json:"created_at"`
	Message   *struct {
		Role      string  `json:"role"`
		Content   string  `json:"content"`
		Thinking  *string `json:"thinking"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Index     int             `json:"index"`
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Response        *string `json:"response"`
	Thinking        *string `json:"thinking"`
	Done            bool    `json:"done"`
	DoneReason      string  `json:"done_reason"`
	TotalDuration   int64   `json:"total_duration"`
	PromptEvalCount int     `json:"prompt_eval_count"`
	EvalCount       int     `json:"eval_count"`
	EvalDuration    int64   `json:"eval_duration"`
	Error           *string `json:"error"`
}

// ndjson reads a streamed answer: every line one JSON object, none blank, the body ending in a
// newline.
func ndjson(t *testing.T, resp *http.Response, body []byte) []ollamaPartResp {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q: %s", ct, body)
	}
	text := string(body)
	if !strings.HasSuffix(text, "\n") {
		t.Fatalf("stream does not end with a newline: %q", text)
	}
	var out []ollamaPartResp
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		var p ollamaPartResp
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, p)
	}
	return out
}

// checkEnd checks that only the last part is done and returns it.
func checkEnd(t *testing.T, parts []ollamaPartResp) ollamaPartResp {
	t.Helper()
	for i, p := range parts {
		if p.Done != (i == len(parts)-1) || p.Error != nil {
			t.Fatalf("part %d of %d: done %v error %v", i, len(parts), p.Done, p.Error)
		}
	}
	return parts[len(parts)-1]
}

func TestOllamaChat(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Let me think.\n</think>\n\nIt is sunny."), Config{})
	req := `{"model":"qwen3:latest","messages":[{"role":"user","content":"Weather?"}]`
	resp, body := post(t, ts.URL+"/api/chat", req+`,"stream":false}`)
	var r ollamaPartResp
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 || r.Message == nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if r.Model != "qwen3:latest" || r.Message.Role != "assistant" || r.Message.Content != "It is sunny." || r.Message.Thinking == nil || *r.Message.Thinking != "Let me think.\n" {
		t.Fatalf("answer %s", body)
	}
	if !r.Done || r.DoneReason != "stop" || r.PromptEvalCount == 0 || r.EvalCount == 0 || r.TotalDuration <= 0 {
		t.Fatalf("final fields %s", body)
	}
	if _, err := time.Parse(time.RFC3339, r.CreatedAt); err != nil {
		t.Fatalf("created_at %q: %v", r.CreatedAt, err)
	}
	// Streamed by default: the same text in lines, thinking only where there is some, the counts last.
	resp, body = post(t, ts.URL+"/api/chat", req+`}`)
	parts := ndjson(t, resp, body)
	last := checkEnd(t, parts)
	var content, thinking strings.Builder
	for _, p := range parts[:len(parts)-1] {
		if p.Message.Thinking != nil {
			if *p.Message.Thinking == "" || p.Message.Content != "" {
				t.Fatalf("thinking line %+v", *p.Message)
			}
			thinking.WriteString(*p.Message.Thinking)
		}
		content.WriteString(p.Message.Content)
	}
	if content.String() != r.Message.Content || thinking.String() != *r.Message.Thinking {
		t.Fatalf("streamed content %q thinking %q", content.String(), thinking.String())
	}
	if last.DoneReason != "stop" || last.EvalCount != r.EvalCount || last.PromptEvalCount != r.PromptEvalCount || last.Message.Content != "" {
		t.Fatalf("last line %+v, one-shot %+v", last, r)
	}
}

// TestOllamaThink: think false renders the prompt with thinking off; a level turns it on; any
// other value is a 400.
func TestOllamaThink(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "Hi."), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	for think, off := range map[string]bool{`false`: true, `"high"`: false, `true`: false} {
		post(t, ts.URL+"/api/chat", `{"messages":[{"role":"user","content":"Hi"}],"stream":false,"think":`+think+`}`)
		got := testTokenizer(t).Decode(prompt)
		if strings.HasSuffix(got, "<think>\n\n</think>\n\n") != off {
			t.Errorf("think %s: prompt %q", think, got)
		}
	}
	resp, body := post(t, ts.URL+"/api/chat", `{"messages":[{"role":"user","content":"Hi"}],"think":"sometimes"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "think must be") {
		t.Fatalf("think sometimes: %d %s", resp.StatusCode, body)
	}
}

func TestOllamaToolCall(t *testing.T) {
	_, ts := testServer(t, newScripted(t, toolScript), Config{})
	req := `{"model":"m","messages":[{"role":"user","content":"Weather in Paris?"}],"tools":` + weatherTools
	_, body := post(t, ts.URL+"/api/chat", req+`,"stream":false}`)
	var r ollamaPartResp
	json.Unmarshal(body, &r)
	if r.Message == nil || len(r.Message.ToolCalls) != 1 || r.DoneReason != "stop" || r.Message.Content != "" {
		t.Fatalf("answer %s", body)
	}
	call := r.Message.ToolCalls[0].Function
	if call.Name != "get_weather" || call.Index != 0 || !sameJSON(string(call.Arguments), `{"city":"Paris","days":3}`) {
		t.Fatalf("tool call %s", body)
	}
	// Streamed: the call arrives whole, in one line, its arguments an object.
	resp, body := post(t, ts.URL+"/api/chat", req+`}`)
	parts := ndjson(t, resp, body)
	checkEnd(t, parts)
	var calls []string
	for _, p := range parts {
		for _, tc := range p.Message.ToolCalls {
			calls = append(calls, tc.Function.Name+" "+string(tc.Function.Arguments))
		}
	}
	if len(calls) != 1 || calls[0] != "get_weather "+string(call.Arguments) {
		t.Fatalf("streamed calls %q", calls)
	}
}

// TestOllamaConversation: a tool-calling conversation renders as its OpenAI equivalent
// (thinking as reasoning_content, an arguments object as JSON text, a tool message).
func TestOllamaConversation(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "Done."), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	req := `{"stream":false,"tools":` + weatherTools + `,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Weather in Paris?"},
	{"role":"assistant","content":"","thinking":"I need the weather.","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
	{"role":"tool","content":"Sunny","tool_name":"get_weather"}]}`
	if resp, body := post(t, ts.URL+"/api/chat", req); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	same := `[{"role":"system","content":"You are terse."},{"role":"user","content":"Weather in Paris?"},
	{"role":"assistant","content":"","reasoning_content":"I need the weather.","tool_calls":[{"id":"x","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
	{"role":"tool","content":"Sunny"}]`
	checkPrompt(t, prompt, same, weatherTools)
}

func TestOllamaGenerate(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "It is sunny."), Config{})
	var prompt []int
	generations := 0
	s.observe = func(g genRequest) { prompt, generations = g.prompt, generations+1 }
	decoded := func() string { return testTokenizer(t).Decode(prompt) }
	// Streamed by default, responses in lines, the prompt rendered with the system prompt.
	resp, body := post(t, ts.URL+"/api/generate", `{"model":"m","prompt":"Hi","system":"Be brief.","think":false}`)
	parts := ndjson(t, resp, body)
	last := checkEnd(t, parts)
	var text strings.Builder
	for _, p := range parts {
		if p.Response == nil || p.Message != nil {
			t.Fatalf("generate line %+v", p)
		}
		text.WriteString(*p.Response)
	}
	if text.String() != "It is sunny." || last.DoneReason != "stop" || last.EvalCount == 0 {
		t.Fatalf("text %q, last %+v", text.String(), last)
	}
	if want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"; decoded() != want {
		t.Fatalf("prompt %q\nwant %q", decoded(), want)
	}
	// raw: the prompt as it is; one object when not streamed.
	raw := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	rawJSON, _ := json.Marshal(raw)
	_, body = post(t, ts.URL+"/api/generate", `{"prompt":`+string(rawJSON)+`,"raw":true,"stream":false}`)
	var r ollamaPartResp
	if json.Unmarshal(body, &r); r.Response == nil || *r.Response != "It is sunny." || !r.Done || decoded() != raw {
		t.Fatalf("raw: %s, prompt %q", body, decoded())
	}
	// No prompt: the model "loads" at once, without generating.
	before := generations
	for keepAlive, reason := range map[string]string{``: "load", `,"keep_alive":0`: "unload", `,"keep_alive":"0s"`: "unload", `,"keep_alive":"5m"`: "load"} {
		_, body = post(t, ts.URL+"/api/generate", `{"model":"qwen3"`+keepAlive+`}`)
		var l ollamaPartResp
		if json.Unmarshal(body, &l); !l.Done || l.DoneReason != reason || l.Response == nil || *l.Response != "" || l.Model != "qwen3" {
			t.Errorf("load with %q: %s", keepAlive, body)
		}
	}
	_, body = post(t, ts.URL+"/api/chat", `{"model":"qwen3","messages":[]}`)
	var l ollamaPartResp
	if json.Unmarshal(body, &l); !l.Done || l.DoneReason != "load" || l.Message == nil {
		t.Errorf("chat load: %s", body)
	}
	if generations != before {
		t.Fatalf("a load request generated")
	}
}

// TestOllamaOptions: num_predict bounds the output, stop cuts it, and the sampling options
// reach the sampler (repeat_penalty as the repetition penalty, seed -1 as no seed).
func TestOllamaOptions(t *testing.T) {
	s, ts := testServer(t, newScripted(t, strings.Repeat("one two three four five six ", 20)), Config{})
	var g genRequest
	s.observe = func(r genRequest) { g = r }
	gen := func(options string) ollamaPartResp {
		t.Helper()
		resp, body := post(t, ts.URL+"/api/generate", `{"prompt":"Count","stream":false,"think":false,"options":`+options+`}`)
		var r ollamaPartResp
		if json.Unmarshal(body, &r); resp.StatusCode != 200 || r.Response == nil {
			t.Fatalf("options %s: %d %s", options, resp.StatusCode, body)
		}
		return r
	}
	if r := gen(`{"num_predict":5}`); r.EvalCount != 5 || r.DoneReason != "length" || g.maxTokens != 5 {
		t.Fatalf("num_predict 5: eval_count %d, %q, max %d", r.EvalCount, r.DoneReason, g.maxTokens)
	}
	if r := gen(`{"stop":["four"]}`); *r.Response != "one two three " || r.DoneReason != "stop" {
		t.Fatalf("stop four: %q %q", *r.Response, r.DoneReason)
	}
	gen(`{"num_predict":-1,"temperature":0.2,"top_k":7,"top_p":0.5,"repeat_penalty":1.3,"seed":-1,"num_ctx":2048,"mirostat":0}`)
	p := g.params
	if g.maxTokens != 4096-len(g.prompt) || p.Temperature != 0.2 || p.TopK != 7 || p.TopP != 0.5 || p.RepetitionPenalty != 1.3 || p.Seed != nil {
		t.Fatalf("mapped: max %d (prompt %d), params %+v", g.maxTokens, len(g.prompt), p)
	}
	if gen(`{"seed":42}`); g.params.Seed == nil || *g.params.Seed != 42 {
		t.Fatalf("seed 42: %v", g.params.Seed)
	}
}

// TestOllamaStreamFailure: a generation that fails mid-stream ends it with an error line.
func TestOllamaStreamFailure(t *testing.T) {
	b := newScripted(t, strings.Repeat("word ", 300))
	b.delay = 5 * time.Millisecond
	_, ts := testServer(t, b, Config{RequestTimeout: 200 * time.Millisecond})
	resp, body := post(t, ts.URL+"/api/generate", `{"prompt":"Talk"}`)
	parts := ndjson(t, resp, body)
	last := parts[len(parts)-1]
	if len(parts) < 2 || last.Error == nil || !strings.Contains(*last.Error, "timed out") || last.Done {
		t.Fatalf("%d lines, last %s", len(parts), body[max(0, len(body)-200):])
	}
}

func TestOllamaListings(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "Hi"), Config{})
	get := func(path string, v any) {
		t.Helper()
		resp, body := do(t, http.MethodGet, ts.URL+path, "", "")
		if err := json.Unmarshal(body, v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	var version struct{ Version string }
	get("/api/version", &version)
	var major, minor, patch int
	if n, _ := fmt.Sscanf(version.Version, "%d.%d.%d", &major, &minor, &patch); n != 3 || major == 0 && (minor < 6 || minor == 6 && patch < 4) {
		t.Fatalf("version %q: VS Code Copilot needs at least 0.6.4", version.Version)
	}
	type details struct {
		Format, Family    string
		ParameterSize     *string `json:"parameter_size"`
		QuantizationLevel string  `json:"quantization_level"`
		Families          []string
	}
	var tags struct {
		Models []struct {
			Name, Model, Digest string
			ModifiedAt          string `json:"modified_at"`
			Size                *int64
			Details             *details
			Capabilities        []string
			ContextLength       int `json:"context_length"`
		}
	}
	get("/api/tags", &tags)
	if len(tags.Models) != 1 {
		t.Fatalf("tags %+v", tags)
	}
	tm := tags.Models[0]
	if _, err := time.Parse(time.RFC3339, tm.ModifiedAt); err != nil {
		t.Fatalf("modified_at %q: %v", tm.ModifiedAt, err)
	}
	if tm.Name != "test-model" || tm.Model != tm.Name || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tm.Digest) || tm.Size == nil ||
		tm.Details == nil || tm.Details.Family != ollamaArch || tm.Details.QuantizationLevel != "Q4" || tm.Details.ParameterSize == nil || tm.ContextLength != 4096 ||
		strings.Join(tm.Capabilities, ",") != "completion,tools,thinking" {
		t.Fatalf("tag %+v", tm)
	}
	var show struct {
		Details      *details
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string
		ModifiedAt   string `json:"modified_at"`
	}
	_, body := post(t, ts.URL+"/api/show", `{"model":"test-model:latest"}`)
	if err := json.Unmarshal(body, &show); err != nil || show.ModelInfo["general.architecture"] != ollamaArch || show.ModelInfo[ollamaArch+".context_length"] != 4096.0 ||
		strings.Contains(strings.Join(show.Capabilities, ","), "vision") || show.Details == nil || show.ModifiedAt == "" {
		t.Fatalf("show %s", body)
	}
	var ps struct {
		Models []struct {
			Name      string
			ExpiresAt string  `json:"expires_at"`
			SizeVRAM  *int64  `json:"size_vram"`
			Digest    string  `json:"digest"`
			Details   details `json:"details"`
		}
	}
	get("/api/ps", &ps)
	if len(ps.Models) != 1 || ps.Models[0].SizeVRAM == nil || ps.Models[0].Digest != tm.Digest || ps.Models[0].Details.Family != ollamaArch {
		t.Fatalf("ps %+v", ps)
	}
	if exp, err := time.Parse(time.RFC3339, ps.Models[0].ExpiresAt); err != nil || exp.Before(time.Now().AddDate(10, 0, 0)) {
		t.Fatalf("expires_at %q", ps.Models[0].ExpiresAt)
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		if resp, body := do(t, method, ts.URL+"/", "", ""); resp.StatusCode != 200 || method == http.MethodGet && string(body) != "Ollama is running" {
			t.Fatalf("%s /: %d %q", method, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/api/version", "/api/tags"} {
		if resp, _ := do(t, http.MethodHead, ts.URL+path, "", ""); resp.StatusCode != 200 {
			t.Fatalf("HEAD %s: %d", path, resp.StatusCode)
		}
	}
	// While the model loads: nothing runs, and what needs the model is a 503 in Ollama's shape.
	s.SetModel(nil)
	get("/api/ps", &ps)
	resp, body := do(t, http.MethodGet, ts.URL+"/api/tags", "", "")
	if len(ps.Models) != 0 || resp.StatusCode != 503 || ollamaError(t, body) == "" {
		t.Fatalf("loading: ps %+v, tags %d %s", ps, resp.StatusCode, body)
	}
}

// ollamaError is the message of an error in Ollama's shape: {"error": "…"} and nothing else.
func ollamaError(t *testing.T, body []byte) string {
	t.Helper()
	var e map[string]any
	if err := json.Unmarshal(body, &e); err != nil || len(e) != 1 {
		t.Fatalf("error body %s", body)
	}
	msg, _ := e["error"].(string)
	return msg
}

func TestOllamaErrors(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Hi"), Config{APIKey: "k"})
	chatBody := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"Hi"` + extra + `}]}`
	}
	for name, tc := range map[string]struct {
		method, path, body, key string
		status                  int
		msg                     string
	}{
		"bad body":     {"POST", "/api/chat", `{"messages":`, "k", 400, "invalid JSON"},
		"bad key":      {"POST", "/api/chat", chatBody(""), "nope", 401, "API key"},
		"no key":       {"GET", "/api/tags", "", "", 401, "API key"},
		"suffix":       {"POST", "/api/generate", `{"prompt":"x","suffix":"y"}`, "k", 400, "fill-in-the-middle"},
		"schema":       {"POST", "/api/chat", strings.TrimSuffix(chatBody(""), "}") + `,"format":{"type":"object","not":{}}}`, "k", 400, "not"},
		"format":       {"POST", "/api/chat", strings.TrimSuffix(chatBody(""), "}") + `,"format":"xml"}`, "k", 400, "format must be"},
		"embed":        {"POST", "/api/embed", `{"model":"nomic-embed-text","input":"x"}`, "k", 400, `"nomic-embed-text" does not support embeddings`},
		"embeddings":   {"POST", "/api/embeddings", `{"model":"m","prompt":"x"}`, "k", 400, "does not support embeddings"},
		"pull":         {"POST", "/api/pull", `{"model":"llama3"}`, "k", 400, "lily pull"},
		"delete":       {"DELETE", "/api/delete", `{"model":"llama3"}`, "k", 400, "serves one model"},
		"blob":         {"HEAD", "/api/blobs/sha256:abc", "", "k", 400, ""},
		"unknown":      {"GET", "/api/nothing", "", "k", 404, "unknown endpoint"},
		"tool args":    {"POST", "/api/chat", `{"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]}`, "k", 400, "must be an object"},
		"negative ctx": {"POST", "/api/generate", `{"prompt":"x","options":{"num_ctx":-1}}`, "k", 400, "num_ctx"},
	} {
		resp, body := do(t, tc.method, ts.URL+tc.path, "", tc.body, "Content-Type", "application/json", "Authorization", "Bearer "+tc.key)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
			continue
		}
		if tc.method == http.MethodHead {
			continue // no body
		}
		if msg := ollamaError(t, body); msg == "" || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %s", name, body)
		}
	}
}
