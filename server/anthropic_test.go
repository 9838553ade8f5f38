package server

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
)

type anthResp struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		Thinking  *string         `json:"thinking"`
		Signature string          `json:"signature"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason   string  `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens     int `json:"input_tokens"`
		CacheRead       int `json:"cache_read_input_tokens"`
		CacheCreation   int `json:"cache_creation_input_tokens"`
		OutputTokens    int `json:"output_tokens"`
		PromptPlusCache int
	} `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type namedEvent struct {
	name string
	data map[string]any
}

// anthEvents reads an Anthropic stream: every data line must follow an event line naming the
// payload's type (the SDK drops events without one).
func anthEvents(t *testing.T, body string) []namedEvent {
	t.Helper()
	var out []namedEvent
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil || name == "" || d["type"] != name {
				t.Fatalf("data %q after event %q (%v)", line, name, err)
			}
			out = append(out, namedEvent{name, d})
			name = ""
		case line == "" || strings.HasPrefix(line, ":"):
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

const anthWeatherTools = `[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}},{"type":"web_search_20250305","name":"web_search"}]`

const toolScript = "I should call the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"

func TestMessagesText(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Let me think.\n</think>\n\nIt is sunny."), Config{})
	req := `{"model":"claude-x","max_tokens":100,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"Weather?"}]}`
	resp, body := post(t, ts.URL+"/v1/messages?beta=true", req, "anthropic-version", "2023-06-01", "anthropic-beta", "whatever-2099")
	var r anthResp
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if r.Type != "message" || r.Role != "assistant" || !strings.HasPrefix(r.ID, "msg_") || len(r.Content) != 2 || r.StopReason != "end_turn" || r.StopSequence != nil {
		t.Fatalf("response %s", body)
	}
	th, tx := r.Content[0], r.Content[1]
	if th.Type != "thinking" || th.Thinking == nil || *th.Thinking != "Let me think.\n" || th.Signature == "" || tx.Type != "text" || tx.Text != "It is sunny." {
		t.Fatalf("blocks %s", body)
	}
	if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || r.Usage.CacheRead != 0 {
		t.Fatalf("usage %+v", r.Usage)
	}
	// The same prompt again: the prefix cache holds it, and usage partitions the prompt.
	_, body = post(t, ts.URL+"/v1/messages", req)
	var again anthResp
	json.Unmarshal(body, &again)
	if again.Usage.CacheRead == 0 || again.Usage.InputTokens+again.Usage.CacheRead != r.Usage.InputTokens {
		t.Fatalf("cached usage %+v, first %+v", again.Usage, r.Usage)
	}
	// display "omitted": the text is left out, the signature still carries it.
	_, body = post(t, ts.URL+"/v1/messages", strings.Replace(req, `"budget_tokens":2000`, `"display":"omitted"`, 1))
	var omitted anthResp
	json.Unmarshal(body, &omitted)
	if c := omitted.Content[0]; c.Thinking == nil || *c.Thinking != "" || c.Signature != th.Signature {
		t.Fatalf("omitted thinking %s", body)
	}
}

func TestMessagesToolUse(t *testing.T) {
	_, ts := testServer(t, newScripted(t, toolScript), Config{})
	req := `{"max_tokens":200,"thinking":{"type":"adaptive"},"tools":` + anthWeatherTools + `,"messages":[{"role":"user","content":"Weather in Paris?"}]}`
	_, body := post(t, ts.URL+"/v1/messages", req)
	var r anthResp
	json.Unmarshal(body, &r)
	if r.StopReason != "tool_use" || len(r.Content) != 2 {
		t.Fatalf("response %s", body)
	}
	call := r.Content[1]
	if call.Type != "tool_use" || call.Name != "get_weather" || !strings.HasPrefix(call.ID, "toolu_") || !sameJSON(string(call.Input), `{"city": "Paris", "days": 3}`) {
		t.Fatalf("tool_use %s", body)
	}
	// Streamed: Anthropic's event order, one block per kind of output, the call's input in
	// input_json_delta pieces that join to the same object.
	_, body = post(t, ts.URL+"/v1/messages", strings.TrimSuffix(req, "}")+`,"stream":true}`)
	events := anthEvents(t, string(body))
	var names []string
	var partial, thinking strings.Builder
	signed := false
	for _, e := range events {
		if n := len(names); n == 0 || names[n-1] != e.name || e.name != "content_block_delta" {
			names = append(names, e.name)
		}
		if e.name == "content_block_delta" {
			d := e.data["delta"].(map[string]any)
			switch d["type"] {
			case "input_json_delta":
				partial.WriteString(d["partial_json"].(string))
			case "thinking_delta":
				thinking.WriteString(d["thinking"].(string))
			case "signature_delta":
				signed = d["signature"] != ""
			}
		}
	}
	want := "message_start content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events %v\nwant %s", names, want)
	}
	last := events[len(events)-2].data
	if !sameJSON(partial.String(), string(call.Input)) || thinking.String() != "I should call the tool.\n" || !signed || last["delta"].(map[string]any)["stop_reason"] != "tool_use" {
		t.Fatalf("streamed input %q thinking %q signed %v final %v", partial.String(), thinking.String(), signed, last)
	}
	var starts []map[string]any
	for _, e := range events {
		if e.name == "content_block_start" {
			starts = append(starts, e.data)
		}
	}
	if start := starts[1]["content_block"].(map[string]any); start["type"] != "tool_use" || start["name"] != "get_weather" || starts[1]["index"] != 1.0 {
		t.Fatalf("tool_use block start %v", starts[1])
	}
}

// TestMessagesConversation: a Claude Code-shaped conversation renders as its OpenAI equivalent:
// system blocks joined (the billing header dropped), thinking recovered from a signature-only
// block, tool_use as tool_calls, tool_result as a tool message, a trailing system message
// folded into the last user message; hosted tools left out.
func TestMessagesConversation(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "Done."), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	sig := s.signer.sign("I need the weather.")
	req := `{"max_tokens":50,"thinking":{"type":"adaptive","display":"omitted"},"tools":` + anthWeatherTools + `,
	"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1; cch=abc;"},{"type":"text","text":"You are a CLI.","cache_control":{"type":"ephemeral"}}],
	"messages":[{"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]},
	{"role":"assistant","content":[{"type":"thinking","thinking":"","signature":"` + sig + `"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
	{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"Sunny"}]}]},
	{"role":"system","content":"Reminder: be brief."}]}`
	resp, body := post(t, ts.URL+"/v1/messages", req)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	same := `[{"role":"system","content":"You are a CLI."},{"role":"user","content":"Weather in Paris?\n\nReminder: be brief."},
	{"role":"assistant","content":"","reasoning_content":"I need the weather.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
	{"role":"tool","tool_call_id":"toolu_1","content":"Sunny"}]`
	checkPrompt(t, prompt, same, weatherTools)
	// count_tokens renders the same prompt.
	_, body = post(t, ts.URL+"/v1/messages/count_tokens", req)
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	if json.Unmarshal(body, &n); n.InputTokens != len(prompt) {
		t.Fatalf("count_tokens %s, prompt %d tokens", body, len(prompt))
	}
}

// TestMessagesPrefillAndStops: a final assistant message is continued, and a stop sequence ends
// the answer with stop_reason stop_sequence.
func TestMessagesPrefillAndStops(t *testing.T) {
	s, ts := testServer(t, newScripted(t, " two, three. END four"), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	_, body := post(t, ts.URL+"/v1/messages", `{"max_tokens":30,"stop_sequences":["END"],"messages":[{"role":"user","content":"Count"},{"role":"assistant","content":"One,"}]}`)
	var r anthResp
	json.Unmarshal(body, &r)
	if r.StopReason != "stop_sequence" || r.StopSequence == nil || *r.StopSequence != "END" || len(r.Content) != 1 || r.Content[0].Text != " two, three. " {
		t.Fatalf("response %s", body)
	}
	if got := testTokenizer(t).Decode(prompt); !strings.HasSuffix(got, "<|im_start|>assistant\n<think>\n\n</think>\n\nOne,") {
		t.Fatalf("prompt does not continue the assistant's message: %q", got)
	}
}

func TestMessagesErrors(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Hi"), Config{APIKey: "k"})
	for name, tc := range map[string]struct {
		body, key string
		status    int
		kind, msg string
	}{
		"no max_tokens":    {`{"messages":[{"role":"user","content":"x"}]}`, "k", 400, "invalid_request_error", "max_tokens"},
		"document":         {`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"AA=="}}]}]}`, "k", 400, "invalid_request_error", "reads text and images"},
		"bad key":          {`{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "nope", 401, "authentication_error", "API key"},
		"thinking type":    {`{"max_tokens":5,"thinking":{"type":"sometimes"},"messages":[{"role":"user","content":"x"}]}`, "k", 400, "invalid_request_error", "thinking.type"},
		"tool_use in user": {`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"b","input":{}}]}]}`, "k", 400, "invalid_request_error", "assistant"},
		"too long":         {`{"max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 5000) + `"}]}`, "k", 400, "invalid_request_error", "prompt is too long: "},
	} {
		resp, body := post(t, ts.URL+"/v1/messages", tc.body, "x-api-key", tc.key)
		var r anthResp
		json.Unmarshal(body, &r)
		if resp.StatusCode != tc.status || r.Type != "error" || r.Error == nil || r.Error.Type != tc.kind || !strings.Contains(r.Error.Message, tc.msg) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
}

// TestChatNormalised: the OpenAI dialect gets the same normalisation: a developer message and
// a trailing system message (400s from the template before), and an assistant prefill.
func TestChatNormalised(t *testing.T) {
	s, ts := testServer(t, newScripted(t, " there."), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"developer","content":"D"},{"role":"user","content":"Hi"},{"role":"system","content":"Late"},{"role":"assistant","content":"Hello"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	want := "<|im_start|>system\nD<|im_end|>\n<|im_start|>user\nHi\n\nLate<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello"
	if got := testTokenizer(t).Decode(prompt); got != want {
		t.Fatalf("prompt %q\nwant %q", got, want)
	}
	for _, choice := range []string{`"required"`, `{"type":"function","function":{"name":"get_weather"}}`} {
		resp, body = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Let"}],"tools":`+weatherTools+`,"tool_choice":`+choice+`}`)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "cannot continue") {
			t.Fatalf("forced call %s after an assistant prefill: %d %s", choice, resp.StatusCode, body)
		}
	}
	resp, body = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"continue_final_message":true}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "continue_final_message") {
		t.Fatalf("continue without an assistant message: %d %s", resp.StatusCode, body)
	}
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

// TestThinkingBudget: after the budget's reasoning tokens the server closes the reasoning
// ("\n</think>\n\n" forced) and what follows is the answer; reasoning_effort "none" turns
// thinking off.
func TestThinkingBudget(t *testing.T) {
	script := "alpha beta gamma delta epsilon zeta eta theta"
	s, ts := testServer(t, newScripted(t, script), Config{})
	tok := testTokenizer(t)
	ids := tok.Encode(script)
	_, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":20,"thinking_budget":3}`)
	var r chatResp
	json.Unmarshal(body, &r)
	msg := r.Choices[0].Message
	if want := tok.Decode(ids[:3]) + "\n"; msg.ReasoningContent != want || msg.Content == nil || *msg.Content == "" {
		t.Fatalf("budget 3: reasoning %q (want %q), content %v", msg.ReasoningContent, want, msg.Content)
	}
	// Anthropic's budget_tokens, the same.
	_, body = post(t, ts.URL+"/v1/messages", `{"max_tokens":20,"thinking":{"type":"enabled","budget_tokens":2},"messages":[{"role":"user","content":"x"}]}`)
	var a anthResp
	json.Unmarshal(body, &a)
	if len(a.Content) != 2 || a.Content[0].Thinking == nil || *a.Content[0].Thinking != tok.Decode(ids[:2])+"\n" {
		t.Fatalf("budget_tokens 2: %s", body)
	}
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	_, body = post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":5,"reasoning_effort":"none"}`)
	var off chatResp
	json.Unmarshal(body, &off)
	if !strings.HasSuffix(tok.Decode(prompt), "<think>\n\n</think>\n\n") || off.Choices[0].Message.ReasoningContent != "" {
		t.Fatalf("effort none: prompt %q, answer %s", tok.Decode(prompt), body)
	}
}
