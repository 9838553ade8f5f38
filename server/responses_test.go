package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type respResp struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		ID               string `json:"id"`
		Type             string `json:"type"`
		Role             string `json:"role"`
		Status           string `json:"status"`
		CallID           string `json:"call_id"`
		Name             string `json:"name"`
		Arguments        string `json:"arguments"`
		EncryptedContent string `json:"encrypted_content"`
		Summary          []respPart
		Content          []respPart `json:"content"`
	} `json:"output"`
	Usage struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

const respTools = `[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]},"strict":false},{"type":"web_search","external_web_access":false},{"type":"namespace","name":"multi_agent_v1","tools":[]}]`

// seqEvents reads a Responses stream: named events whose payload repeats the name, with
// sequence numbers 0, 1, 2, … in order.
func seqEvents(t *testing.T, body string) []namedEvent {
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
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil || d["type"] != name || d["sequence_number"] != float64(len(out)) {
				t.Fatalf("event %d: %q after event %q (%v)", len(out), line, name, err)
			}
			out = append(out, namedEvent{name, d})
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

func TestResponsesToolCall(t *testing.T) {
	_, ts := testServer(t, newScripted(t, toolScript), Config{})
	req := `{"model":"gpt-5-codex","input":[{"type":"message","role":"developer","content":"You are Codex."},{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in Paris?"}]}],"tools":` + respTools + `,"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"summary":"auto"},"store":false,"include":["reasoning.encrypted_content"]}`
	resp, body := post(t, ts.URL+"/v1/responses", req)
	var r respResp
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if r.Object != "response" || r.Status != "completed" || len(r.Output) != 2 || !strings.HasPrefix(r.ID, "resp_") {
		t.Fatalf("response %s", body)
	}
	rs, fc := r.Output[0], r.Output[1]
	if rs.Type != "reasoning" || len(rs.Summary) != 1 || rs.Summary[0].Text != "I should call the tool.\n" || rs.EncryptedContent == "" {
		t.Fatalf("reasoning item %s", body)
	}
	if fc.Type != "function_call" || fc.Name != "get_weather" || !strings.HasPrefix(fc.CallID, "call_") || !sameJSON(fc.Arguments, `{"city":"Paris","days":3}`) || fc.Status != "completed" {
		t.Fatalf("function_call item %s", body)
	}
	u := r.Usage
	if u.OutputTokensDetails.ReasoningTokens == 0 || u.OutputTokensDetails.ReasoningTokens >= u.OutputTokens || u.TotalTokens != u.InputTokens+u.OutputTokens {
		t.Fatalf("usage %+v", u)
	}
	// Streamed: the event sequence Codex and openai-node read, each item added before its
	// deltas and done with its whole self before response.completed.
	_, body = post(t, ts.URL+"/v1/responses", strings.TrimSuffix(req, "}")+`,"stream":true}`)
	events := seqEvents(t, string(body))
	var names []string
	for _, e := range events {
		if n := len(names); n == 0 || names[n-1] != e.name || !strings.HasSuffix(e.name, ".delta") {
			names = append(names, e.name)
		}
	}
	want := "response.created response.in_progress response.output_item.added response.reasoning_summary_part.added response.reasoning_summary_text.delta response.reasoning_summary_text.done response.reasoning_summary_part.done response.output_item.done response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done response.completed"
	if strings.Join(names, " ") != want {
		t.Fatalf("events %v\nwant %s", names, want)
	}
	var done map[string]any
	for _, e := range events {
		if e.name == "response.output_item.done" {
			done = e.data["item"].(map[string]any)
		}
	}
	final := events[len(events)-1].data["response"].(map[string]any)
	if !sameJSON(done["arguments"].(string), fc.Arguments) || len(final["output"].([]any)) != 2 || final["usage"] == nil {
		t.Fatalf("done item %v, final %v", done, final)
	}
}

// TestResponsesConversation: a Codex-shaped second turn — developer messages, a reasoning item
// with this server's encrypted_content, the assistant's text and a function_call (one turn, as
// the model wrote them) and the call's output — renders as the equivalent OpenAI chat
// conversation.
func TestResponsesConversation(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "Sunny."), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	req := `{"model":"m","instructions":"Be terse.","tools":` + respTools + `,"input":[
	{"type":"message","role":"developer","content":"You are Codex."},
	{"type":"message","role":"user","content":"Weather in Paris?"},
	{"type":"reasoning","summary":[{"type":"summary_text","text":"stale summary"}],"encrypted_content":"` + s.signer.sign("I need the weather.") + `"},
	{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
	{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
	{"type":"web_search_call","id":"ws_1","status":"completed"},
	{"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"21C"}]}]}`
	resp, body := post(t, ts.URL+"/v1/responses", req)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	same := `[{"role":"system","content":"Be terse.\n\nYou are Codex."},{"role":"user","content":"Weather in Paris?"},
	{"role":"assistant","content":"Checking.","reasoning_content":"I need the weather.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
	{"role":"tool","tool_call_id":"call_1","content":"21C"}]`
	checkPrompt(t, prompt, same, weatherTools)
}

// TestResponsesStored: a stored response is served by GET, continued by previous_response_id
// (its conversation and answer come first, its instructions do not), and deleted by DELETE.
func TestResponsesStored(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "Paris is sunny."), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	_, body := post(t, ts.URL+"/v1/responses", `{"model":"m","instructions":"First rules.","input":"Weather?","reasoning":{"effort":"none"}}`)
	var first respResp
	json.Unmarshal(body, &first)
	resp, got := do(t, "GET", ts.URL+"/v1/responses/"+first.ID, "", "")
	if resp.StatusCode != 200 || string(got) != string(body) {
		t.Fatalf("GET: %d %s\nwant %s", resp.StatusCode, got, body)
	}
	_, body = post(t, ts.URL+"/v1/responses", `{"model":"m","input":"And tomorrow?","previous_response_id":"`+first.ID+`","reasoning":{"effort":"none"}}`)
	if json.Unmarshal(body, new(respResp)); !strings.Contains(string(body), `"status":"completed"`) {
		t.Fatalf("continued: %s", body)
	}
	text := testTokenizer(t).Decode(prompt)
	if !strings.HasPrefix(text, "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n") || !strings.Contains(text, "Paris is sunny.<|im_end|>\n<|im_start|>user\nAnd tomorrow?") || strings.Contains(text, "First rules.") {
		t.Fatalf("continued prompt %q", text)
	}
	if resp, _ := do(t, "DELETE", ts.URL+"/v1/responses/"+first.ID, "", ""); resp.StatusCode != 200 {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	resp, body = post(t, ts.URL+"/v1/responses", `{"model":"m","input":"x","previous_response_id":"`+first.ID+`"}`)
	if resp.StatusCode != 404 || !strings.Contains(string(body), "previous_response_id") {
		t.Fatalf("after DELETE: %d %s", resp.StatusCode, body)
	}
}

func TestResponsesIncompleteAndErrors(t *testing.T) {
	_, ts := testServer(t, newScripted(t, strings.Repeat("word ", 40)), Config{})
	_, body := post(t, ts.URL+"/v1/responses", `{"model":"m","input":"x","max_output_tokens":5,"reasoning":{"effort":"none"}}`)
	var r respResp
	json.Unmarshal(body, &r)
	if r.Status != "incomplete" || r.IncompleteDetails == nil || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 5 {
		t.Fatalf("incomplete: %s", body)
	}
	for name, tc := range map[string]struct{ body, msg string }{
		"file":        {`{"input":[{"role":"user","content":[{"type":"input_file","file_data":"AA=="}]}]}`, "reads text and images"},
		"bad effort":  {`{"input":"x","reasoning":{"effort":"extreme"}}`, "none, minimal, low, medium, high, xhigh or max"},
		"bad item":    {`{"input":[{"type":"teleport"}]}`, "teleport"},
		"bad format":  {`{"input":"x","text":{"format":{"type":"yaml"}}}`, "text.format.type"},
		"bad choice":  {`{"input":"x","tool_choice":"sometimes"}`, "tool_choice"},
		"empty input": {`{"input":[]}`, "no messages"},
	} {
		resp, body := post(t, ts.URL+"/v1/responses", tc.body)
		if resp.StatusCode != 400 || !strings.Contains(string(body), tc.msg) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
}

// TestResponseStoreBounds: the store keeps the latest responses within its count and bytes.
func TestResponseStoreBounds(t *testing.T) {
	s := newResponseStore()
	for i := range storedResponses + 10 {
		s.put(fmt.Sprint(i), storedResponse{response: []byte("{}")})
	}
	if _, ok := s.get("9"); ok || s.order.Len() != storedResponses {
		t.Fatalf("count bound: %d kept, oldest still there: %v", s.order.Len(), ok)
	}
	big := make([]byte, storedBytes/3)
	for i := range 4 {
		s.put(fmt.Sprint("big", i), storedResponse{conversation: big})
	}
	if _, ok := s.get("big0"); ok || s.bytes > storedBytes {
		t.Fatalf("byte bound: %d bytes kept, big0 still there: %v", s.bytes, ok)
	}
	if _, ok := s.get("big3"); !ok {
		t.Fatal("the latest response was dropped")
	}
}
