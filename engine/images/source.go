// Package images turns a request's images into prompt input: it reads image references (data
// URLs, or http(s) URLs when allowed), encodes each image once through the backend's vision
// tower behind a cache keyed by a hash of its bytes, counts an image's tokens from its header
// alone, and expands a rendered prompt's image pads into the runner's image spans.
package images

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

var (
	// ErrURLsOff marks a remote image URL while Options.AllowURLs is off.
	ErrURLsOff = errors.New("images: remote image URLs are off (send the image as a data URL)")
	// ErrTooBig marks image bytes over Options.MaxBytes.
	ErrTooBig = errors.New("images: image data too big")
	// ErrBadRef marks a reference that is neither a data URL nor an http(s) URL, or a malformed one.
	ErrBadRef = errors.New("images: bad image reference")
	// ErrFetch marks a remote image that could not be fetched.
	ErrFetch = errors.New("images: fetching the image")
)

// Defaults for Options' zero values.
const (
	DefaultMaxBytes   = 20 << 20
	DefaultCacheBytes = 256 << 20
	DefaultTimeout    = 30 * time.Second
)

// Options bound what an Encoder accepts and keeps.
type Options struct {
	// AllowURLs lets references be http(s) URLs, fetched by the server. Off by default: a
	// server that fetches what clients name can be pointed at its own network.
	AllowURLs bool
	// MaxBytes bounds an image's encoded bytes, inline or fetched (0: DefaultMaxBytes).
	MaxBytes int64
	// Timeout bounds one fetch, headers and body (0: DefaultTimeout).
	Timeout time.Duration
	// CacheBytes bounds the encoded images kept, 4 bytes per value (0: DefaultCacheBytes;
	// negative: none kept).
	CacheBytes int64
	// MaxPixels caps the resized image's area below the processor's own cap (0: the processor's).
	MaxPixels int
}

func (o Options) withDefaults() Options {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	return o
}

// Source is a parsed image reference: inline bytes (a data URL) or a remote URL to fetch.
type Source struct {
	Data []byte // a data URL's bytes
	URL  string // an http or https URL (Data is nil)
}

// ParseSource reads a reference. A data URL's media type is ignored (clients mislabel images;
// the decoder sniffs the bytes); its base64 may be standard or URL-safe, padded or not, and
// wrapped in whitespace. maxBytes bounds the decoded data (≤ 0: DefaultMaxBytes).
func ParseSource(ref string, maxBytes int64) (Source, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	ref = strings.TrimSpace(ref)
	if len(ref) >= 5 && strings.EqualFold(ref[:5], "data:") {
		data, err := parseDataURL(ref[5:], maxBytes)
		return Source{Data: data}, err
	}
	u, err := url.Parse(ref)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Source{}, fmt.Errorf("%w: %.40q is neither a data URL nor an http(s) URL", ErrBadRef, ref)
	}
	return Source{URL: u.String()}, nil
}

// parseDataURL decodes what follows "data:": a media type and parameters, a comma, the data.
func parseDataURL(rest string, maxBytes int64) ([]byte, error) {
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, fmt.Errorf("%w: a data URL without a comma", ErrBadRef)
	}
	if !strings.HasSuffix(strings.ToLower(strings.TrimSpace(meta)), ";base64") {
		// Percent-encoding is legal but nobody sends binary images that way.
		return nil, fmt.Errorf("%w: the data URL is not base64 (%.40q)", ErrBadRef, meta)
	}
	payload = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
			return -1
		}
		return r
	}, payload)
	payload = strings.TrimRight(payload, "=")
	if int64(len(payload))/4*3 > maxBytes {
		return nil, fmt.Errorf("%w: the data URL holds about %d bytes, over the limit of %d", ErrTooBig, int64(len(payload))/4*3, maxBytes)
	}
	enc := base64.RawStdEncoding
	if strings.ContainsAny(payload, "-_") {
		enc = base64.RawURLEncoding
	}
	data, err := enc.DecodeString(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: the data URL's base64: %v", ErrBadRef, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrTooBig, len(data), maxBytes)
	}
	return data, nil
}

// newClient is the fetcher: the timeout covers the whole exchange, and a redirect may only go
// to another http(s) URL.
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if s := req.URL.Scheme; s != "http" && s != "https" {
				return fmt.Errorf("a redirect to a %q URL", s)
			}
			if len(via) >= 10 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
}

// fetch reads a remote image: a 200 response, at most maxBytes of body.
func fetch(ctx context.Context, c *http.Client, rawURL string, maxBytes int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %s", ErrFetch, rawURL, resp.Status)
	}
	if resp.ContentLength > maxBytes {
		return nil, fmt.Errorf("%w: %s declares %d bytes, over the limit of %d", ErrTooBig, rawURL, resp.ContentLength, maxBytes)
	}
	// One byte past the limit tells a body of exactly maxBytes from a longer one.
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrFetch, rawURL, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%w: %s sent more than %d bytes", ErrTooBig, rawURL, maxBytes)
	}
	return data, nil
}
