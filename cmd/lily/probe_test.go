package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lilyformac/lily/server"
)

// serveDemo serves the demo model (CPU backend, a prefix cache of cacheMB) on a loopback port
// until the test ends.
func serveDemo(t *testing.T, cacheMB int) string {
	return serveDemoWith(t, serveOptions{backend: "cpu", cacheMB: cacheMB})
}

// serveDemoWith serves the demo model with o's backend, cache and parallel settings.
func serveDemoWith(t *testing.T, o serveOptions) string {
	o.demo, o.kvBits, o.prefillChunk = true, 16, -1
	m, closeModel, err := loadServedModel(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Config{QueueLimit: 4})
	srv.SetModel(m)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close(); closeModel() })
	return "http://" + ln.Addr().String()
}

// markupTokens are the demo vocabulary's ids of <tool_call>, </tool_call>, <think>, </think> and
// of the plain tokens "<", "function", "=", ">", "</", "parameter", ">\n", "\n", "\n<" …: a
// logit_bias toward them makes the random model write Qwen's markup where it does not belong.
const markupBias = `{"151657": 6, "151658": 6, "151667": 5, "151668": 5, "27": 4, "1688": 4, "28": 4, "522": 4, "16181": 4, "29": 4, "198": 3, "4913": 3, "9207": 3}`

const probeTools = `[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}}}},
 {"type": "function", "function": {"name": "function", "parameters": {"type": "object",
  "properties": {"parameter": {"type": "string"}}}}}]`

// probeRequest is a random chat request in the spirit of a hostile client: tools × tool_choice ×
// thinking × stop strings × logprobs × temperature × a logit_bias toward the markup tokens.
func probeRequest(r *rand.Rand, i int) (body string, forced bool) {
	f := map[string]any{
		"messages":             []any{map[string]any{"role": "user", "content": fmt.Sprintf("call a tool %d", i)}},
		"max_tokens":           24 + r.IntN(73),
		"seed":                 i,
		"temperature":          []float64{0, 0.7, 1}[r.IntN(3)],
		"chat_template_kwargs": map[string]any{"enable_thinking": r.IntN(2) == 0},
	}
	if r.IntN(4) > 0 {
		f["tools"] = json.RawMessage(probeTools)
		choice := []any{nil, "auto", "none", "required", map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}[r.IntN(5)]
		if choice != nil {
			f["tool_choice"] = choice
		}
		forced = choice == "required" || choice != nil && choice != "auto" && choice != "none"
		f["parallel_tool_calls"] = r.IntN(2) == 0
	}
	if stops := [][]string{nil, {">"}, {"<"}, {"get_weather", ">"}, {"\n"}, {"</", "the"}}[r.IntN(6)]; stops != nil {
		f["stop"] = stops
	}
	if r.IntN(2) == 0 {
		f["logprobs"] = true
		if k := r.IntN(4); k > 0 {
			f["top_logprobs"] = k
		}
	}
	if r.IntN(3) > 0 {
		f["logit_bias"] = json.RawMessage(markupBias)
	}
	b, _ := json.Marshal(f)
	return string(b), forced
}

// probeAnswer is what a chat answer says, gathered alike from one JSON body or a stream.
type probeAnswer struct {
	Content, Reasoning string
	Calls              []string // name(arguments)
	Finish             string
	Tokens             []string // the logprob entries' tokens
}

func readOnce(t *testing.T, raw []byte) probeAnswer {
	t.Helper()
	var r struct {
		Choices []struct {
			Message struct {
				Content          *string
				ReasoningContent string `json:"reasoning_content"`
				ToolCalls        []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
			Logprobs     *struct{ Content []struct{ Token string } }
		}
	}
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("not a chat completion (%v): %q", err, raw)
	}
	c := r.Choices[0]
	a := probeAnswer{Reasoning: c.Message.ReasoningContent, Finish: c.FinishReason}
	if c.Message.Content != nil {
		a.Content = *c.Message.Content
	}
	for _, tc := range c.Message.ToolCalls {
		a.Calls = append(a.Calls, tc.Function.Name+"("+tc.Function.Arguments+")")
	}
	if c.Logprobs != nil {
		for _, e := range c.Logprobs.Content {
			a.Tokens = append(a.Tokens, e.Token)
		}
	}
	return a
}

func readStream(t *testing.T, raw []byte) probeAnswer {
	t.Helper()
	var a probeAnswer
	var args []string
	var names []string
	done := false
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, ":") {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || done {
			t.Fatalf("stream line %q (after [DONE]: %v)", line, done)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content          string
					ReasoningContent string `json:"reasoning_content"`
					ToolCalls        []struct {
						Index    int
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
				FinishReason *string `json:"finish_reason"`
				Logprobs     *struct{ Content []struct{ Token string } }
			}
			Error any
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil || ch.Error != nil {
			t.Fatalf("stream event %q: %v", data, err)
		}
		for _, c := range ch.Choices {
			a.Content += c.Delta.Content
			a.Reasoning += c.Delta.ReasoningContent
			for _, tc := range c.Delta.ToolCalls {
				for len(names) <= tc.Index {
					names, args = append(names, ""), append(args, "")
				}
				names[tc.Index] += tc.Function.Name
				args[tc.Index] += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				a.Finish = *c.FinishReason
			}
			if c.Logprobs != nil {
				for _, e := range c.Logprobs.Content {
					a.Tokens = append(a.Tokens, e.Token)
				}
			}
		}
	}
	if !done {
		t.Fatalf("the stream did not end with [DONE]: %q", raw)
	}
	for i := range names {
		a.Calls = append(a.Calls, names[i]+"("+args[i]+")")
	}
	return a
}

// TestRandomizedRequests: 150 hostile chat requests on the demo model. Every answer is a JSON
// answer or a JSON error (never an empty body); every 200 parses; the stream of the same request
// ends with [DONE] and says what the one-shot answer says (content, reasoning, calls, finish
// reason and logprob tokens); no content carries Qwen's markup; a forced call is always made.
func TestRandomizedRequests(t *testing.T) {
	base := serveDemo(t, 0) // no prefix cache: equal requests compute alike
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r := rand.New(rand.NewPCG(20, 1))
	answered := 0
	for i := range 150 {
		body, forced := probeRequest(r, i)
		once, onceRaw := probePost(t, ctx, base, body)
		stream, streamRaw := probePost(t, ctx, base, strings.Replace(body, "{", `{"stream":true,`, 1))
		if once != stream {
			t.Fatalf("case %d: %s\none-shot %d, stream %d: %s | %s", i, body, once, stream, onceRaw, streamRaw)
		}
		if once != http.StatusOK {
			var e struct{ Error struct{ Message string } }
			if once != http.StatusBadRequest || json.Unmarshal(onceRaw, &e) != nil || e.Error.Message == "" {
				t.Fatalf("case %d: %s\n%d %q", i, body, once, onceRaw)
			}
			continue
		}
		answered++
		a, s := readOnce(t, onceRaw), readStream(t, streamRaw)
		if !reflect.DeepEqual(a, s) {
			t.Fatalf("case %d: %s\none-shot %+v\nstream   %+v", i, body, a, s)
		}
		for _, tag := range []string{"<tool_call", "</tool_call", "<think>", "</think>"} {
			if strings.Contains(a.Content, tag) {
				t.Fatalf("case %d: %s\ncontent %q carries %s", i, body, a.Content, tag)
			}
		}
		if forced && (len(a.Calls) == 0 || a.Finish != "tool_calls") {
			t.Fatalf("case %d: %s\na forced call is missing: %+v", i, body, a)
		}
	}
	if answered < 120 {
		t.Fatalf("only %d of 150 requests were answered", answered)
	}
	t.Logf("%d of 150 answered, the rest refused with a JSON error", answered)
}

func probePost(t *testing.T, ctx context.Context, base, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) == 0 {
		t.Fatalf("%s: %d with an empty body", body, resp.StatusCode)
	}
	return resp.StatusCode, raw
}
