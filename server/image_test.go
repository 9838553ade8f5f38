package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"log"
	"net/http"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/chat"
	"github.com/lilyformac/lily/engine/cpu"
	"github.com/lilyformac/lily/engine/demo"
	"github.com/lilyformac/lily/engine/images"
	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/runner"
	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/resources"
)

// TestImagePlaceholderLogged: without a vision tower an image is answered (200) with a
// placeholder saying why, a log line and the placeholder metric; a turn without images leaves
// no log line.
func TestImagePlaceholderLogged(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Hi"), Config{})
	var out bytes.Buffer
	prev := log.Writer()
	log.SetOutput(&out)
	defer log.SetOutput(prev)
	image := `{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}`
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":2,"messages":[{"role":"user","content":[`+image+`,`+image+`]}]}`)
	if resp.StatusCode != 200 || strings.Count(out.String(), "an image became a placeholder") != 2 {
		t.Fatalf("%d %s; log %q", resp.StatusCode, body, out.String())
	}
	if m := metricsText(t, ts.URL); !strings.Contains(m, "lily_image_placeholders_total 2") {
		t.Errorf("metrics lack 2 placeholders:\n%s", grepLines(m, "lily_image"))
	}
	out.Reset()
	if resp, body := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}`); resp.StatusCode != 200 || out.Len() != 0 {
		t.Fatalf("%d %s; log %q", resp.StatusCode, body, out.String())
	}
}

// visionServer serves the demo model, with its vision tower, on the CPU reference.
func visionServer(t *testing.T) (*Server, string) {
	t.Helper()
	tok := testTokenizer(t)
	raw, err := resources.DemoTokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	var ids [4]int
	for i, s := range []string{"<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"} {
		ids[i], _ = tok.TokenID(s)
	}
	end, _ := tok.TokenID("<|im_end|>")
	visionDir, err := demo.Ensure(t.TempDir(), demo.Files{TokenizerJSON: raw,
		ChatTemplate: []byte(chat.BuiltinSource()), VocabSize: tok.VocabSize(), EOSTokenIDs: []int{end}, VisionTokens: ids})
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.Load(visionDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	b := cpu.New(w)
	proc, err := vision.LoadProcessor(visionDir, w.Config.Vision)
	if err != nil {
		t.Fatal(err)
	}
	r := runner.New(b, runner.Options{CacheBytes: 64 << 20, Context: 4096})
	s := New(Config{})
	s.SetModel(&Model{ID: "lily-demo", Runner: r, Tokenizer: TokenizerOf(tok), Template: TemplateOf(chat.Builtin()), StopIDs: []int{end},
		Context: 4096, Images: images.NewEncoder(b, proc, images.Options{})})
	return s, startHTTP(t, s).URL
}

// pngBase64 is a w×h PNG whose pixels depend on seed, base64-encoded.
func pngBase64(t *testing.T, w, h int, seed uint8) string {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(x*4) + seed, uint8(y*4) ^ seed, seed, 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// imageRequests are one image question in each dialect (a 96×64 image: 6 tokens on the demo's
// processor), the Anthropic one inside a tool result.
func imageRequests(b64 string) map[string]string {
	url := "data:image/png;base64," + b64
	return map[string]string{
		"/v1/chat/completions": `{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"` + url + `"}}]}]}`,
		"/v1/responses":        `{"max_output_tokens":2,"input":[{"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"` + url + `"}]}]}`,
		"/v1/messages": `{"max_tokens":2,"messages":[{"role":"user","content":"Look"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]}]}]}`,
		"/api/chat": `{"stream":false,"options":{"num_predict":2},"messages":[{"role":"user","content":"What is this?","images":["` + b64 + `"]}]}`,
	}
}

// TestImagesInEveryDialect: an image in each dialect reaches the model as its 6 image tokens
// (no placeholder), encoded once for all four (the encoded-image cache), and usage counts them.
func TestImagesInEveryDialect(t *testing.T) {
	s, url := visionServer(t)
	var seen []genRequest
	s.observe = func(g genRequest) { seen = append(seen, g) }
	pad, _ := testTokenizer(t).TokenID("<|image_pad|>")
	for path, body := range imageRequests(pngBase64(t, 96, 64, 1)) {
		resp, out := post(t, url+path, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		g := seen[len(seen)-1]
		n := 0
		for _, id := range g.prompt {
			if id == pad {
				n++
			}
		}
		if len(g.images) != 1 || n != 6 || g.images[0].H*g.images[0].W != 6 || bytes.Contains([]byte(out), []byte("cannot be seen")) {
			t.Errorf("%s: %d images, %d pad tokens (want 1 image of 6 tokens)", path, len(g.images), n)
		}
	}
	m := metricsText(t, url)
	if !strings.Contains(m, "lily_image_encodes_total 1") || !strings.Contains(m, "lily_image_cache_hits_total 3") {
		t.Errorf("want 1 encode and 3 cache hits:\n%s", grepLines(m, "lily_image"))
	}
}

// TestImagePrefixCache: the same image twice is a prefix-cache hit over the whole prompt and is
// not encoded again; another image of the same size is a miss from the image on, and encoded.
func TestImagePrefixCache(t *testing.T) {
	_, url := visionServer(t)
	ask := func(b64 string) (prompt, cached int) {
		resp, out := post(t, url+"/v1/chat/completions", imageRequests(b64)["/v1/chat/completions"])
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		var r struct {
			Usage struct {
				Prompt  int `json:"prompt_tokens"`
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		json.Unmarshal([]byte(out), &r)
		return r.Usage.Prompt, r.Usage.Details.Cached
	}
	a, b := pngBase64(t, 96, 64, 7), pngBase64(t, 96, 64, 9)
	p1, _ := ask(a)
	p2, c2 := ask(a)
	if p2 != p1 || c2 != p1 {
		t.Errorf("the same image again: %d of %d prompt tokens cached, want all", c2, p2)
	}
	p3, c3 := ask(b)
	if p3 != p1 || c3 >= p1-6 {
		t.Errorf("another image of the same size: %d of %d cached, want fewer than the tokens before its image", c3, p3)
	}
	if m := metricsText(t, url); !strings.Contains(m, "lily_image_encodes_total 2") || !strings.Contains(m, "lily_image_cache_hits_total 1") {
		t.Errorf("want 2 encodes and 1 cache hit:\n%s", grepLines(m, "lily_image"))
	}
}

// TestUnusableImagesArePlaceholders: a corrupt image, a HEIC file and a remote URL (not allowed
// by default) are answered with a placeholder saying why, never a 400; the placeholder is in
// the prompt instead of image tokens.
func TestUnusableImagesArePlaceholders(t *testing.T) {
	s, url := visionServer(t)
	var seen []genRequest
	s.observe = func(g genRequest) { seen = append(seen, g) }
	heic := base64.StdEncoding.EncodeToString(append([]byte{0, 0, 0, 0x18}, []byte("ftypheic\x00\x00\x00\x00mif1heic")...))
	for name, ref := range map[string]string{
		"corrupt": "data:image/png;base64,iVBORw0KGgo=",
		"heic":    "data:image/heic;base64," + heic,
		"remote":  "https://example.com/cat.png",
	} {
		body := `{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"` + ref + `"}}]}]}`
		resp, out := post(t, url+"/v1/chat/completions", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, out)
		}
		if g := seen[len(seen)-1]; len(g.images) != 0 {
			t.Errorf("%s: %d images reached the model", name, len(g.images))
		}
	}
	if m := metricsText(t, url); !strings.Contains(m, "lily_image_placeholders_total 3") {
		t.Errorf("want 3 placeholders:\n%s", grepLines(m, "lily_image"))
	}
}

// TestVisionAdvertised: /v1/models, Ollama's /api/show and /status say the model sees images.
func TestVisionAdvertised(t *testing.T) {
	_, url := visionServer(t)
	checks := []struct{ method, path, body, want string }{
		{"GET", "/v1/models", "", `"input_modalities":["text","image"]`},
		{"POST", "/api/show", `{"model":"lily-demo"}`, `"vision"`},
		{"GET", "/status", "", `"vision":true`},
	}
	for _, c := range checks {
		_, out := do(t, c.method, url+c.path, "", c.body, "Content-Type", "application/json")
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%s lacks %s: %s", c.path, c.want, out)
		}
	}
}

// TestCountTokensWithImage: Anthropic's count_tokens counts an image's tokens as the prompt holds
// them, without running the tower.
func TestCountTokensWithImage(t *testing.T) {
	_, url := visionServer(t)
	b64 := pngBase64(t, 96, 64, 3)
	count := func(content string) int {
		_, out := post(t, url+"/v1/messages/count_tokens", `{"messages":[{"role":"user","content":`+content+`}]}`)
		var r struct {
			N int `json:"input_tokens"`
		}
		json.Unmarshal([]byte(out), &r)
		return r.N
	}
	plain := count(`[{"type":"text","text":"What is this?"}]`)
	with := count(`[{"type":"text","text":"What is this?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]`)
	if with-plain != 6+2 { // its 6 pad tokens and <|vision_start|>, <|vision_end|>
		t.Errorf("an image adds %d tokens, want 8", with-plain)
	}
	if m := metricsText(t, url); !strings.Contains(m, "lily_image_encodes_total 0") {
		t.Errorf("count_tokens ran the tower:\n%s", grepLines(m, "lily_image"))
	}
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	_, out := do(t, http.MethodGet, url+"/metrics", "", "")
	return string(out)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestImageMarkersInText: text that holds the template's image markers literally (an agent
// reading a vision project's source) beside a real image is answered 200 with the image used —
// the markers stay text, so the image pads still match the images — in chat completions and in
// Anthropic's count_tokens, which counts as serving does.
func TestImageMarkersInText(t *testing.T) {
	_, url := visionServer(t)
	b64 := pngBase64(t, 96, 64, 3)
	text := `the template writes <|vision_start|><|image_pad|><|vision_end|> for an image, <|video_pad|> for video`
	body := `{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"` + text + `"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]},` +
		`{"role":"assistant","content":"` + text + `"},{"role":"user","content":"` + text + `"}]}`
	resp, out := post(t, url+"/v1/chat/completions", body)
	if resp.StatusCode != http.StatusOK || bytes.Contains(out, []byte("cannot be seen")) {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if m := metricsText(t, url); !strings.Contains(m, "lily_image_encodes_total 1") || !strings.Contains(m, "lily_image_placeholders_total 0") {
		t.Errorf("the image was not used:\n%s", grepLines(m, "lily_image"))
	}
	count := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + text + `"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]}]}`
	if resp, out := post(t, url+"/v1/messages/count_tokens", count); resp.StatusCode != http.StatusOK {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, out)
	}
}
