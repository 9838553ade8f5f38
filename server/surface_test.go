package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// observed runs one request and returns what the server asked the runner for, with the prompt text.
func observed(t *testing.T, s *Server, url, body string) (genRequest, string, []byte) {
	t.Helper()
	var got genRequest
	s.observe = func(g genRequest) { got = g }
	resp, out := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	return got, testTokenizer(t).Decode(got.prompt), out
}

func TestSamplingDefaultsAndOverrides(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "ok"), Config{})
	g, prompt, _ := observed(t, s, ts.URL, `{"messages":`+userHi+`}`)
	p := g.params
	if p.Temperature != 1 || p.TopP != 0.95 || p.TopK != 20 || p.PresencePenalty != 0 || !strings.HasSuffix(prompt, "<think>\n") {
		t.Errorf("thinking defaults: %+v, prompt ends %q", p, prompt[len(prompt)-20:])
	}
	for _, off := range []string{`"chat_template_kwargs":{"enable_thinking":false}`, `"reasoning_effort":"none"`} {
		g, prompt, _ = observed(t, s, ts.URL, `{"messages":`+userHi+`,`+off+`}`)
		p = g.params
		if p.Temperature != 0.7 || p.TopP != 0.8 || p.TopK != 20 || p.PresencePenalty != 1.5 || !strings.HasSuffix(prompt, "<think>\n\n</think>\n\n") {
			t.Errorf("%s: non-thinking defaults %+v, prompt ends %q", off, p, prompt[len(prompt)-20:])
		}
	}
	g, _, _ = observed(t, s, ts.URL, `{"messages":`+userHi+`,"temperature":0.2,"top_p":0.5,"top_k":-1,"min_p":0.05,"presence_penalty":0.1,"frequency_penalty":0.3,"repetition_penalty":1.1,"seed":7,"logit_bias":{"5":-3},"max_tokens":50,"max_completion_tokens":9,"unknown_field":{"x":1}}`)
	p = g.params
	if p.Temperature != 0.2 || p.TopP != 0.5 || p.TopK != 0 || p.MinP != 0.05 || p.PresencePenalty != 0.1 || p.FrequencyPenalty != 0.3 || p.RepetitionPenalty != 1.1 || p.Seed == nil || *p.Seed != 7 || p.LogitBias[5] != -3 {
		t.Errorf("explicit values: %+v", p)
	}
	if g.maxTokens != 9 {
		t.Errorf("max_completion_tokens should win over max_tokens: %d", g.maxTokens)
	}
}

func TestToolChoiceModes(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>"), Config{})
	_, prompt, _ := observed(t, s, ts.URL, `{"messages":`+userHi+`,"tools":`+weatherTools+`,"tool_choice":"none"}`)
	if strings.Contains(prompt, "<tools>") {
		t.Error(`tool_choice "none" still rendered the tools`)
	}
	_, prompt, _ = observed(t, s, ts.URL, `{"messages":`+userHi+`,"tools":`+weatherTools+`}`)
	if !strings.Contains(prompt, `"name": "get_weather"`) {
		t.Error("tools missing from the prompt")
	}
	g, prompt, body := observed(t, s, ts.URL, `{"messages":`+userHi+`,"tools":`+weatherTools+`,"tool_choice":"required"}`)
	// Thinking off, and the grammar starts the answer at <tool_call> (constrain.go): the scripted
	// model's text does not fit it, yet the answer is a call with the required parameter.
	if !strings.HasSuffix(prompt, "<|im_start|>assistant\n<think>\n\n</think>\n\n") || g.params.Temperature != 0.7 {
		t.Errorf("required: prompt ends %q, temperature %g", prompt[len(prompt)-40:], g.params.Temperature)
	}
	var r chatResp
	if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason != "tool_calls" || len(r.Choices[0].Message.ToolCalls) == 0 {
		t.Fatalf("required: %s", body)
	}
	var args map[string]any
	if call := r.Choices[0].Message.ToolCalls[0]; call.Function.Name != "get_weather" || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil {
		t.Fatalf("required: call %+v", call)
	}
	if _, ok := args["city"].(string); !ok {
		t.Fatalf("required: arguments %v lack the required string city", args)
	}
}

func TestParallelToolCallsFalse(t *testing.T) {
	two := "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
	_, ts := testServer(t, newScripted(t, two), Config{})
	base := `{"messages":` + userHi + `,"tools":` + weatherTools + `,"chat_template_kwargs":{"enable_thinking":false}`
	for _, c := range []struct {
		extra string
		calls int
	}{{"", 2}, {`,"parallel_tool_calls":false`, 1}} {
		_, body := post(t, ts.URL+"/v1/chat/completions", base+c.extra+"}")
		var r chatResp
		json.Unmarshal(body, &r)
		if got := len(r.Choices[0].Message.ToolCalls); got != c.calls {
			t.Errorf("%q: %d calls, want %d: %s", c.extra, got, c.calls, body)
		}
	}
}

func TestNotReadyAndTimeout(t *testing.T) {
	s := New(Config{})
	ts := newHTTPTest(t, s)
	resp, body := post(t, ts+"/v1/chat/completions", `{"messages":`+userHi+`}`)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "model_not_ready") {
		t.Fatalf("no model: %d %s", resp.StatusCode, body)
	}
	b := newScripted(t, strings.Repeat("slow ", 100))
	b.delay = 20 * time.Millisecond
	_, ts2 := testServer(t, b, Config{RequestTimeout: 100 * time.Millisecond})
	resp, body = post(t, ts2.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"max_tokens":200}`)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "timed out") {
		t.Fatalf("timeout: %d %s", resp.StatusCode, body)
	}
}
