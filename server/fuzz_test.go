package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzChatRequest: any request body gets a well-formed answer — never a panic (gin's recovery
// would make it a 500) and never a non-JSON error.
func FuzzChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"max_tokens":3}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":` + weatherTools + `,"tool_choice":"required"}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","content":"ok"},{"role":"user","content":"go"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"stop":["a","b"],"logit_bias":{"5":-100},"seed":-3,"top_k":-1}`,
		`{"messages":"nope"}`, `[]`, `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":25}`,
	} {
		f.Add([]byte(seed))
	}
	b := newScripted(f, "short answer")
	b.cfg.MaxPositions = 200 // bounds generations that never end (e.g. a +100 logit bias)
	s, _ := testServer(f, b, Config{})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(string(body)))
		req.Host = "localhost:8000"
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		switch rec.Code {
		case 200:
			return
		case 400, 413, 429, 503:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
			t.Fatalf("status %d without an error object for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
