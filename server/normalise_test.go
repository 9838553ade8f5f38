package server

import (
	"encoding/json"
	"testing"

	"github.com/lilyformac/lily/engine/chat"
)

// TestNormalisationInEveryDialect: each normalisation case, sent in each dialect's own shape,
// renders the prompt its normalised OpenAI equivalent renders to (thinking off everywhere, so
// the dialects' different thinking defaults do not matter); an image becomes the same placeholder
// text in every dialect (200, never a 400 that would stay in an agent's history).
func TestNormalisationInEveryDialect(t *testing.T) {
	s, ts := testServer(t, newScripted(t, "ok"), Config{})
	var prompt []int
	s.observe = func(g genRequest) { prompt = g.prompt }
	type dialect struct{ path, body string }
	chatReq := func(msgs string) dialect {
		return dialect{"/v1/chat/completions", `{"max_tokens":2,"reasoning_effort":"none","messages":` + msgs + `}`}
	}
	respReq := func(items string) dialect {
		return dialect{"/v1/responses", `{"max_output_tokens":2,"reasoning":{"effort":"none"},"input":` + items + `}`}
	}
	anthReq := func(system, msgs string) dialect {
		if system != "" {
			system = `"system":` + system + `,`
		}
		return dialect{"/v1/messages", `{"max_tokens":2,` + system + `"messages":` + msgs + `}`}
	}
	ollamaReq := func(msgs string) dialect {
		return dialect{"/api/chat", `{"stream":false,"think":false,"options":{"num_predict":2},"messages":` + msgs + `}`}
	}
	for _, tc := range []struct {
		name     string
		same     string // the normalised conversation
		dialects []dialect
	}{
		{"developer is system", `[{"role":"system","content":"D"},{"role":"user","content":"Hi"}]`, []dialect{
			chatReq(`[{"role":"developer","content":"D"},{"role":"user","content":"Hi"}]`),
			respReq(`[{"role":"developer","content":"D"},{"role":"user","content":"Hi"}]`),
			anthReq(`"D"`, `[{"role":"user","content":"Hi"}]`),
			ollamaReq(`[{"role":"developer","content":"D"},{"role":"user","content":"Hi"}]`),
		}},
		{"leading systems merged", `[{"role":"system","content":"A\n\nB"},{"role":"user","content":"Hi"}]`, []dialect{
			chatReq(`[{"role":"system","content":"A"},{"role":"system","content":"B"},{"role":"user","content":"Hi"}]`),
			{"/v1/responses", `{"max_output_tokens":2,"reasoning":{"effort":"none"},"instructions":"A","input":[{"role":"developer","content":"B"},{"role":"user","content":"Hi"}]}`},
			anthReq(`"A"`, `[{"role":"system","content":"B"},{"role":"user","content":"Hi"}]`),
			ollamaReq(`[{"role":"system","content":"A"},{"role":"system","content":"B"},{"role":"user","content":"Hi"}]`),
		}},
		{"later system folded", `[{"role":"user","content":"Hi\n\nLate"}]`, []dialect{
			chatReq(`[{"role":"user","content":"Hi"},{"role":"system","content":"Late"}]`),
			respReq(`[{"role":"user","content":"Hi"},{"role":"system","content":"Late"}]`),
			anthReq("", `[{"role":"user","content":"Hi"},{"role":"system","content":"Late"}]`),
			ollamaReq(`[{"role":"user","content":"Hi"},{"role":"system","content":"Late"}]`),
		}},
		{"an image is a placeholder", `[{"role":"user","content":"What is this?` + imagePlaceholder("this server runs no vision tower") + `"}]`, []dialect{
			chatReq(`[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]`),
			respReq(`[{"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"data:image/png;base64,AA=="}]}]`),
			anthReq("", `[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]`),
			ollamaReq(`[{"role":"user","content":"What is this?","images":["AA=="]}]`),
		}},
		{"final assistant continued", `[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure,"}]`, []dialect{
			chatReq(`[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure,"}]`),
			respReq(`[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"output_text","text":"Sure,"}]}]`),
			anthReq("", `[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure,"}]`),
			ollamaReq(`[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure,"}]`),
		}},
	} {
		msgs, err := chat.Normalize(json.RawMessage(tc.same))
		if err != nil {
			t.Fatal(err)
		}
		end, _ := chat.ResolveEnding(nil, nil, nil, chat.EndsWithAssistant(msgs))
		want, err := chat.Builtin().Render(chat.Request{Messages: msgs, AddGenerationPrompt: end.AddGenerationPrompt, ContinueFinal: end.ContinueFinal,
			Kwargs: map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tc.dialects {
			prompt = nil
			resp, body := post(t, ts.URL+d.path, d.body)
			if got := testTokenizer(t).Decode(prompt); resp.StatusCode != 200 || got != want {
				t.Errorf("%s via %s: %d %s\nprompt %q\nwant   %q", tc.name, d.path, resp.StatusCode, body, got, want)
			}
		}
	}
}
