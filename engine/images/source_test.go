package images_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/images"
)

func TestDataURLVariants(t *testing.T) {
	data := readImage(t, "landscape.png")
	if len(data)%3 == 0 { // ParseSource needs no image: drop a byte so the base64 has padding
		data = data[:len(data)-1]
	}
	std := base64.StdEncoding.EncodeToString(data)
	if !strings.ContainsAny(std, "+/") || !strings.HasSuffix(std, "=") {
		t.Fatal("the test data's base64 has no + or / or no padding: the variants below would not differ")
	}
	wrapped := ""
	for s := std; s != ""; s = s[min(len(s), 76):] {
		wrapped += s[:min(len(s), 76)] + "\r\n"
	}
	refs := map[string]string{
		"png":        "data:image/png;base64," + std,
		"no type":    "data:;base64," + std,
		"wrong type": "DATA:image/jpeg;BASE64," + std,
		"url-safe":   "data:image/png;base64," + base64.URLEncoding.EncodeToString(data),
		"unpadded":   "data:image/png;base64," + base64.RawStdEncoding.EncodeToString(data),
		"url raw":    "data:image/png;base64," + base64.RawURLEncoding.EncodeToString(data),
		"wrapped":    "data:image/png;base64," + wrapped,
	}
	for name, ref := range refs {
		src, err := images.ParseSource(ref, 0)
		if err != nil || !bytes.Equal(src.Data, data) || src.URL != "" {
			t.Errorf("%s: %d bytes, URL %q, %v; want the file's %d bytes", name, len(src.Data), src.URL, err, len(data))
		}
	}
	for _, bad := range []string{"data:image/png,abc", "data:image/png;base64", "data:;base64,@@@@", "ftp://host/x.png", "file:///etc/passwd", "/tmp/x.png", "http:///x.png"} {
		if _, err := images.ParseSource(bad, 0); !errors.Is(err, images.ErrBadRef) {
			t.Errorf("%q: %v, want ErrBadRef", bad, err)
		}
	}
	if _, err := images.ParseSource(refs["png"], int64(len(data)-1)); !errors.Is(err, images.ErrTooBig) {
		t.Errorf("a data URL one byte over the limit: %v, want ErrTooBig", err)
	}
	if src, err := images.ParseSource("https://example.com/a.png", 0); err != nil || src.URL != "https://example.com/a.png" {
		t.Errorf("an https URL: %+v %v", src, err)
	}
}

// server serves the landscape image at /img, streamed without a Content-Length at /stream
// (so only the read limit can catch it), and 404 elsewhere.
func server(t *testing.T, data []byte) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) { w.Write(data) })
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		w.Write(data[len(data)/2:])
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestURLs(t *testing.T) {
	b, proc := tiny(t)
	data := readImage(t, "landscape.png")
	s := server(t, data)
	ctx := context.Background()

	if _, err := images.NewEncoder(b, proc, images.Options{}).Encode(ctx, s.URL+"/img"); !errors.Is(err, images.ErrURLsOff) {
		t.Fatalf("a URL by default: %v, want ErrURLsOff", err)
	}
	e := images.NewEncoder(b, proc, images.Options{AllowURLs: true})
	fromURL, err := e.Encode(ctx, s.URL+"/img")
	if err != nil {
		t.Fatal(err)
	}
	inline, err := e.Encode(ctx, dataURL(data))
	if err != nil {
		t.Fatal(err)
	}
	if fromURL.ID != inline.ID || b.runs.Load() != 1 {
		t.Errorf("the same bytes by URL and inline: IDs %x and %x, %d tower runs; want one ID, one run", fromURL.ID, inline.ID, b.runs.Load())
	}
	if n, err := e.Tokens(s.URL + "/img"); err != nil || n != len(inline.Rows) {
		t.Errorf("Tokens by URL: %d %v, want %d", n, err, len(inline.Rows))
	}

	small := images.NewEncoder(b, proc, images.Options{AllowURLs: true, MaxBytes: int64(len(data) - 1)})
	for _, path := range []string{"/img", "/stream"} {
		if _, err := small.Encode(ctx, s.URL+path); !errors.Is(err, images.ErrTooBig) {
			t.Errorf("%s one byte over MaxBytes: %v, want ErrTooBig", path, err)
		}
	}
	exact := images.NewEncoder(b, proc, images.Options{AllowURLs: true, MaxBytes: int64(len(data))})
	if _, err := exact.Encode(ctx, s.URL+"/stream"); err != nil {
		t.Errorf("a streamed body of exactly MaxBytes: %v", err)
	}
	for _, path := range []string{"/missing", "/moved"} {
		if _, err := e.Encode(ctx, s.URL+path); !errors.Is(err, images.ErrFetch) {
			t.Errorf("%s: %v, want ErrFetch", path, err)
		}
	}
}
