package server

import (
	"bytes"
	"log"
	"strings"
	"testing"
)

// TestImagePlaceholderLogged: an image answered with its placeholder leaves one log line saying
// how many images the prompt held that way; a turn without images leaves none.
func TestImagePlaceholderLogged(t *testing.T) {
	_, ts := testServer(t, newScripted(t, "Hi"), Config{})
	var out bytes.Buffer
	prev := log.Writer()
	log.SetOutput(&out)
	defer log.SetOutput(prev)
	image := `{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}`
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":2,"messages":[{"role":"user","content":[`+image+`,`+image+`]}]}`)
	if resp.StatusCode != 200 || !strings.Contains(out.String(), "2 image(s) in the prompt are a text placeholder") {
		t.Fatalf("%d %s; log %q", resp.StatusCode, body, out.String())
	}
	out.Reset()
	if resp, body := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}`); resp.StatusCode != 200 || out.Len() != 0 {
		t.Fatalf("%d %s; log %q", resp.StatusCode, body, out.String())
	}
}
