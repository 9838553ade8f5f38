//go:build linux

package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lilyformac/lily/server"
)

// TestServeImagesOnEmu: the demo model served on the emulated GPU backend sees images (the tower
// and the prompt's image rows on the GPU plan): /v1/models says so, an image in the OpenAI,
// Anthropic (inside a tool result) and Ollama dialects is answered 200 without a placeholder,
// the same image again is a prefix-cache hit over the whole prompt and is not encoded again.
func TestServeImagesOnEmu(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	m, closeModel, err := loadServedModel(serveOptions{demo: true, backend: "emu", cacheMB: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer closeModel()
	if m.Images == nil {
		t.Fatalf("no image encoder on the emulator: %s", m.VisionWhy)
	}
	srv := server.New(server.Config{})
	srv.SetModel(m)
	ts := httptest.NewServer(srv)
	defer ts.Close()
	b64 := testPNG(t, 96, 64)
	url := "data:image/png;base64," + b64
	chat := `{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`
	first := postOK(t, ts.URL+"/v1/chat/completions", chat)
	again := postOK(t, ts.URL+"/v1/chat/completions", chat)
	var u1, u2 struct {
		Usage struct {
			Prompt  int `json:"prompt_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	json.Unmarshal(first, &u1)
	json.Unmarshal(again, &u2)
	if u1.Usage.Prompt < 6 || u2.Usage.Details.Cached != u2.Usage.Prompt {
		t.Errorf("the same image again: %d of %d prompt tokens cached (first: %d tokens)", u2.Usage.Details.Cached, u2.Usage.Prompt, u1.Usage.Prompt)
	}
	postOK(t, ts.URL+"/v1/messages", `{"max_tokens":2,"messages":[{"role":"user","content":"Look"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"`+b64+`"}}]}]}]}`)
	postOK(t, ts.URL+"/api/chat", `{"stream":false,"options":{"num_predict":2},"messages":[{"role":"user","content":"What is this?","images":["`+b64+`"]}]}`)
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"lily_image_encodes_total 1", "lily_image_cache_hits_total 3", "lily_image_placeholders_total 0"} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// postOK posts body and requires a 200 whose answer has no image placeholder.
func postOK(t *testing.T, url, body string) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || bytes.Contains(out, []byte("cannot be seen")) {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, out)
	}
	return out
}

// testPNG is a w×h PNG of a gradient, base64-encoded.
func testPNG(t *testing.T, w, h int) string {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x * 4), uint8(y * 4), 90, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}
