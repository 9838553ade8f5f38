package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// markupIn names the Qwen markup a client-visible text holds, raw or JSON-escaped ("": none).
func markupIn(s string) string {
	for _, tag := range []string{"<tool_call", "</tool_call", "<think>", "</think>", "<function=", "<parameter="} {
		if strings.Contains(s, tag) || strings.Contains(s, strings.ReplaceAll(strings.ReplaceAll(tag, "<", `\u003c`), ">", `\u003e`)) {
			return tag
		}
	}
	return ""
}

// dialectCall is one dialect's request for the weather call with the given stop strings, and
// how to read the content and the called tool's city from its one-shot answer.
type dialectCall struct {
	name, path string
	body       func(stops string, stream bool) string
	read       func(t *testing.T, body []byte) (content, city string)
}

var anthTools = `[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`

var stopDialects = []dialectCall{
	{"openai", "/v1/chat/completions",
		func(stops string, stream bool) string {
			return fmt.Sprintf(`{"messages":%s,"tools":%s,"stop":%s,"stream":%v,"chat_template_kwargs":{"enable_thinking":false}}`, userHi, weatherTools, stops, stream)
		},
		func(t *testing.T, body []byte) (string, string) {
			var r chatResp
			if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) != 1 {
				t.Fatalf("openai: %s", body)
			}
			m := r.Choices[0].Message
			content := ""
			if m.Content != nil {
				content = *m.Content
			}
			if len(m.ToolCalls) != 1 {
				return content, ""
			}
			var args struct{ City string }
			json.Unmarshal([]byte(m.ToolCalls[0].Function.Arguments), &args)
			return content, args.City
		}},
	{"anthropic", "/v1/messages",
		func(stops string, stream bool) string {
			return fmt.Sprintf(`{"model":"m","max_tokens":200,"messages":%s,"tools":%s,"stop_sequences":%s,"stream":%v}`, userHi, anthTools, stops, stream)
		},
		func(t *testing.T, body []byte) (string, string) {
			var r struct {
				Content []struct {
					Type, Text string
					Input      struct{ City string }
				}
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("anthropic: %s", body)
			}
			content, city := "", ""
			for _, b := range r.Content {
				content += b.Text
				if b.Type == "tool_use" {
					city = b.Input.City
				}
			}
			return content, city
		}},
	{"ollama", "/api/chat",
		func(stops string, stream bool) string {
			return fmt.Sprintf(`{"model":"m","messages":%s,"tools":%s,"options":{"stop":%s},"think":false,"stream":%v}`, userHi, weatherTools, stops, stream)
		},
		func(t *testing.T, body []byte) (string, string) {
			var r struct {
				Message struct {
					Content   string
					ToolCalls []struct {
						Function struct{ Arguments struct{ City string } }
					} `json:"tool_calls"`
				}
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatalf("ollama: %s", body)
			}
			if len(r.Message.ToolCalls) != 1 {
				return r.Message.Content, ""
			}
			return r.Message.Content, r.Message.ToolCalls[0].Function.Arguments.City
		}},
}

// TestStopStringsApplyToContentOnly: a stop string that occurs in a tool call's markup does not
// cut the call, in every dialect that takes stop strings, streamed or not; one that occurs in
// the answer's text ends it there, before the call.
func TestStopStringsApplyToContentOnly(t *testing.T) {
	b := newScripted(t, "Checking now.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>")
	_, ts := testServer(t, b, Config{})
	for _, d := range stopDialects {
		for _, stops := range []string{`[">"]`, `["<"]`, `["</function>","=get"]`, `["Paris"]`} {
			resp, body := post(t, ts.URL+d.path, d.body(stops, false))
			content, city := d.read(t, body)
			if resp.StatusCode != 200 || city != "Paris" || content != "Checking now." {
				t.Errorf("%s, stop %s: %d content %q city %q: %s", d.name, stops, resp.StatusCode, content, city, body)
			}
			resp, body = post(t, ts.URL+d.path, d.body(stops, true))
			if tag := markupIn(string(body)); resp.StatusCode != 200 || tag != "" || !strings.Contains(string(body), "Paris") {
				t.Errorf("%s stream, stop %s: %d, markup %q: %s", d.name, stops, resp.StatusCode, tag, body)
			}
		}
		_, body := post(t, ts.URL+d.path, d.body(`["now"]`, false))
		if content, city := d.read(t, body); content != "Checking " || city != "" {
			t.Errorf("%s, stop in the text: content %q city %q: %s", d.name, content, city, body)
		}
	}
}

// TestStopStringsSkipReasoning: a stop string in the reasoning does not end it; the same string
// in the answer does.
func TestStopStringsSkipReasoning(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Think > twice.\n</think>\n\nSo > it is."), Config{})
	_, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":`+userHi+`,"stop":[">"]}`)
	var r chatResp
	json.Unmarshal(body, &r)
	if m := r.Choices[0].Message; m.ReasoningContent != "Think > twice.\n" || m.Content == nil || *m.Content != "So " || r.Choices[0].FinishReason != "stop" {
		t.Fatalf("stop > with reasoning: %s", body)
	}
}

// TestForcedCallSurvivesStops: tool_choice required (Anthropic: any) with the stop strings ">"
// and "<" still returns the call, and no markup in any answer, streamed or not, in every dialect
// that can force a call (Responses has no stop strings; the call must still come whole).
func TestForcedCallSurvivesStops(t *testing.T) {
	b := newScripted(t, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>")
	_, ts := testServer(t, b, Config{})
	responsesTools := `[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	forced := []struct {
		name, path string
		body       func(stops string, stream bool) string
	}{
		{"openai", "/v1/chat/completions", func(stops string, stream bool) string {
			return fmt.Sprintf(`{"messages":%s,"tools":%s,"tool_choice":"required","stop":%s,"stream":%v,"max_tokens":64}`, userHi, weatherTools, stops, stream)
		}},
		{"anthropic", "/v1/messages", func(stops string, stream bool) string {
			return fmt.Sprintf(`{"model":"m","max_tokens":64,"messages":%s,"tools":%s,"tool_choice":{"type":"any"},"stop_sequences":%s,"stream":%v}`, userHi, anthTools, stops, stream)
		}},
		{"responses", "/v1/responses", func(_ string, stream bool) string {
			return fmt.Sprintf(`{"model":"m","input":"What is the weather in Paris?","tools":%s,"tool_choice":"required","max_output_tokens":64,"stream":%v}`, responsesTools, stream)
		}},
	}
	for _, d := range forced {
		for _, stops := range []string{`[">"]`, `["<"]`} {
			for _, stream := range []bool{false, true} {
				resp, body := post(t, ts.URL+d.path, d.body(stops, stream))
				s := string(body)
				if tag := markupIn(s); resp.StatusCode != 200 || tag != "" || !strings.Contains(s, "get_weather") || !strings.Contains(s, "Paris") {
					t.Errorf("%s, stop %s, stream %v: %d, markup %q: %s", d.name, stops, stream, resp.StatusCode, tag, s)
				}
			}
		}
	}
}
