package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// renderNormalized normalises and renders messages with the built-in template, as the server does.
func renderNormalized(t *testing.T, messages string, kwargs map[string]json.RawMessage) (string, error) {
	t.Helper()
	msgs, err := Normalize(json.RawMessage(messages))
	if err != nil {
		return "", err
	}
	end, err := ResolveEnding(nil, nil, kwargs, EndsWithAssistant(msgs))
	if err != nil {
		return "", err
	}
	return Builtin().Render(Request{Messages: msgs, AddGenerationPrompt: end.AddGenerationPrompt, ContinueFinal: end.ContinueFinal, Kwargs: kwargs})
}

// TestNormalizeCases: each shape the template rejects renders as the equivalent it accepts.
func TestNormalizeCases(t *testing.T) {
	for _, tc := range []struct {
		name, in, same string // same: a conversation the template accepts as it is, rendering the same
	}{
		{"developer is system",
			`[{"role":"developer","content":"Be brief."},{"role":"user","content":"Hi"}]`,
			`[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]`},
		{"leading systems merged",
			`[{"role":"system","content":"A"},{"role":"developer","content":[{"type":"text","text":"B"},{"type":"text","text":"C"}]},{"role":"user","content":"Hi"}]`,
			`[{"role":"system","content":"A\n\nBC"},{"role":"user","content":"Hi"}]`},
		{"trailing system folded into the last user message",
			`[{"role":"system","content":"S"},{"role":"user","content":"Hi"},{"role":"system","content":"Late"}]`,
			`[{"role":"system","content":"S"},{"role":"user","content":"Hi\n\nLate"}]`},
		{"system between turns folded backwards, past the assistant",
			`[{"role":"user","content":"Q1"},{"role":"assistant","content":"A1"},{"role":"system","content":"Note"},{"role":"user","content":"Q2"}]`,
			`[{"role":"user","content":"Q1\n\nNote"},{"role":"assistant","content":"A1"},{"role":"user","content":"Q2"}]`},
		{"system before the first user message after an assistant one folded forwards",
			`[{"role":"assistant","content":"Hello"},{"role":"system","content":"Note"},{"role":"user","content":"Q"}]`,
			`[{"role":"assistant","content":"Hello"},{"role":"user","content":"Note\n\nQ"}]`},
		{"late system folded into a message with an image, as a text part of its own",
			`[{"role":"user","content":[{"type":"image"},{"type":"text","text":"What is this?"}]},{"role":"system","content":"Late"}]`,
			`[{"role":"user","content":[{"type":"image"},{"type":"text","text":"What is this?"},{"type":"text","text":"\n\nLate"}]}]`},
		{"system before a message with an image folded forwards",
			`[{"role":"assistant","content":"Hello"},{"role":"system","content":"Note"},{"role":"user","content":[{"type":"image"}]}]`,
			`[{"role":"assistant","content":"Hello"},{"role":"user","content":[{"type":"text","text":"Note\n\n"},{"type":"image"}]}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderNormalized(t, tc.in, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Builtin().Render(Request{Messages: json.RawMessage(tc.same), AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("rendered\n%q\nwant\n%q", got, want)
			}
			if _, err := Builtin().Render(Request{Messages: json.RawMessage(tc.in), AddGenerationPrompt: true}); err == nil && tc.name != "developer is system" {
				t.Fatalf("the template accepts the raw conversation: the case tests nothing")
			}
		})
	}
}

// TestNormalizeKeepsValid: a conversation the template accepts comes back byte for byte.
func TestNormalizeKeepsValid(t *testing.T) {
	in := `[{"role":"system","content":"S"},{"role":"user","content":"Hi","name":"x"}]`
	got, err := Normalize(json.RawMessage(in))
	if err != nil || string(got) != in {
		t.Fatalf("Normalize = %s, %v", got, err)
	}
}

// TestContinueFinal: a final assistant message is continued: the prompt ends right after its
// content, where the closed rendering would have <|im_end|>.
func TestContinueFinal(t *testing.T) {
	msgs := `[{"role":"user","content":"Count to 3"},{"role":"assistant","content":"1, 2,"}]`
	got, err := renderNormalized(t, msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := Builtin().Render(Request{Messages: json.RawMessage(msgs)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, "1, 2,") || got+"<|im_end|>\n" != closed {
		t.Fatalf("continued prompt %q, closed %q", got, closed)
	}
	// Asked for the generation prompt instead, the assistant turn is closed and a new one opens.
	add := true
	end, err := ResolveEnding(&add, nil, nil, true)
	if err != nil || end.ContinueFinal || !end.AddGenerationPrompt {
		t.Fatalf("add_generation_prompt true on a final assistant message: %+v, %v", end, err)
	}
}

func TestResolveEnding(t *testing.T) {
	yes, no := true, false
	kwNo := map[string]json.RawMessage{"add_generation_prompt": json.RawMessage("false")}
	for _, tc := range []struct {
		name      string
		add, cont *bool
		kwargs    map[string]json.RawMessage
		assistant bool
		want      Ending
		err       bool
	}{
		{"user last", nil, nil, nil, false, Ending{AddGenerationPrompt: true}, false},
		{"assistant last", nil, nil, nil, true, Ending{ContinueFinal: true}, false},
		{"kwargs false override top-level true", &yes, nil, kwNo, false, Ending{}, false},
		{"continue false closes the assistant turn", nil, &no, nil, true, Ending{AddGenerationPrompt: true}, false},
		{"add_generation_prompt false closes it without a new turn", &no, nil, nil, true, Ending{}, false},
		{"both true", &yes, &yes, nil, true, Ending{}, true},
		{"continue without assistant", nil, &yes, nil, false, Ending{}, true},
	} {
		got, err := ResolveEnding(tc.add, tc.cont, tc.kwargs, tc.assistant)
		if (err != nil) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("%s: %+v, %v; want %+v (error %v)", tc.name, got, err, tc.want, tc.err)
		}
		var ie *InputError
		if err != nil && !errors.As(err, &ie) {
			t.Errorf("%s: error %v is not an InputError", tc.name, err)
		}
	}
}

// TestKwargsAddGenerationPrompt: chat_template_kwargs' add_generation_prompt wins in Render too.
func TestKwargsAddGenerationPrompt(t *testing.T) {
	msgs := json.RawMessage(`[{"role":"user","content":"Hi"}]`)
	off := map[string]json.RawMessage{"add_generation_prompt": json.RawMessage("false")}
	got, err := Builtin().Render(Request{Messages: msgs, AddGenerationPrompt: true, Kwargs: off})
	if err != nil || strings.Contains(got, "<|im_start|>assistant") {
		t.Fatalf("rendered %q, %v: want no generation prompt", got, err)
	}
}
