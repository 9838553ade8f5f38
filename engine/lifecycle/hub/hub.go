// Package hub downloads a checkpoint pinned to one revision from a Hugging Face Hub (or a mirror
// named by HF_ENDPOINT) into a local directory. Downloads are parallel, ranged and resumable;
// every file is verified against the Hub's listing before it is renamed into place, and a marker
// written last records the verified set so later starts can check the directory cheaply.
package hub

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultEndpoint is the public Hub; HF_ENDPOINT overrides it.
const DefaultEndpoint = "https://huggingface.co"

// File is one file of a checkpoint, as the Hub lists it and as the completion marker records it.
// Exactly one of SHA256 (LFS files) and GitSHA1 (small files stored in git) is set.
type File struct {
	Path    string `json:"path"` // slash-separated, relative to the checkpoint root
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256,omitempty"`
	GitSHA1 string `json:"git_sha1,omitempty"`
}

// Progress is a snapshot of a pull or a full verification.
type Progress struct {
	Done  int64  // bytes on disk and accounted for (verified files + partial data)
	Total int64  // bytes of the whole checkpoint
	Start int64  // bytes that were already on disk when the pull started (a resume)
	File  string // the file most recently written or hashed
	// FilesDone of Files are verified in place.
	FilesDone, Files int
}

// Client talks to one Hub endpoint. The zero value is not usable; start from New.
type Client struct {
	Endpoint string       // scheme://host[/prefix], no trailing slash
	Token    string       // sent as a bearer token, only to Endpoint's host
	HTTP     *http.Client // nil: a client with sane timeouts

	Files     int   // files downloaded at once
	Streams   int   // ranged requests in flight across all files
	ChunkSize int64 // a large file is fetched as ranges of this size

	Attempts       int           // tries of one request in a row without progress before giving up
	Backoff        time.Duration // first retry delay; doubles per failure, with jitter
	MaxBackoff     time.Duration // cap of the doubling
	MaxRetryAfter  time.Duration // cap on a server's Retry-After
	StallTimeout   time.Duration // a response body silent this long is dropped and retried
	VerifyAttempts int           // downloads of one file before a checksum mismatch is final
	ListPages      int           // tree API pages one listing may take: a bound on runaway pagination

	Progress         func(Progress) // called from one goroutine every ProgressInterval and at the end
	ProgressInterval time.Duration
	Logf             func(format string, args ...any) // retries and waits; nil: silent
	// Retrying, when set, hears each retry before its wait, so a status can say the download
	// is retrying, why, and when it tries next (Logf says the same in words). Streams retry on
	// their own goroutines: it may be called concurrently.
	Retrying func(Retry)

	// Seams for tests.
	sleep     func(ctx context.Context, d time.Duration) error
	openPart  func(path string, truncate bool) (partFile, error)
	freeSpace func(dir string) (uint64, error)
}

// New returns a Client configured from the environment (HF_ENDPOINT, HF_TOKEN) with defaults
// sized for a ~20 GB checkpoint of a few multi-GB shards.
func New() *Client {
	ep := strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/")
	if ep == "" {
		ep = DefaultEndpoint
	}
	return &Client{
		Endpoint:         ep,
		Token:            strings.TrimSpace(os.Getenv("HF_TOKEN")),
		Files:            4,
		Streams:          8,
		ChunkSize:        64 << 20,
		Attempts:         8,
		Backoff:          500 * time.Millisecond,
		MaxBackoff:       30 * time.Second,
		MaxRetryAfter:    5 * time.Minute,
		StallTimeout:     60 * time.Second,
		VerifyAttempts:   3,
		ListPages:        1000, // a checkpoint's listing takes a page or two
		ProgressInterval: 250 * time.Millisecond,
	}
}

// httpClient returns the client used for every request: the caller's (or a default one) with a
// transport that adds the token only on requests to the endpoint's own host. Doing it per hop
// keeps the token off the CDN the Hub redirects LFS downloads to; net/http alone would forward
// it to any subdomain (cdn-lfs.huggingface.co) and to another port of the same host.
func (c *Client) httpClient() (*http.Client, error) {
	ep, err := url.Parse(c.Endpoint)
	if err != nil || ep.Host == "" {
		return nil, fmt.Errorf("hub endpoint %q: not an absolute URL (check HF_ENDPOINT)", c.Endpoint)
	}
	hc := &http.Client{}
	if c.HTTP != nil {
		*hc = *c.HTTP
	}
	base := hc.Transport
	if base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = time.Minute
		t.MaxIdleConnsPerHost = max(c.Streams, 2)
		base = t
	}
	hc.Transport = &authTransport{base: base, scheme: ep.Scheme, host: ep.Host, token: c.Token}
	return hc, nil
}

type authTransport struct {
	base                http.RoundTripper
	scheme, host, token string
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.token != "" && r.URL.Host == t.host && r.URL.Scheme == t.scheme {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(r)
}

// StatusError is an HTTP answer other than success. Code and ErrorCode (the Hub's X-Error-Code,
// e.g. RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) drive the user-facing message.
type StatusError struct {
	Code       int
	URL        string
	ErrorCode  string
	Message    string // X-Error-Message
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("GET %s: %s", e.URL, http.StatusText(e.Code))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return fmt.Sprintf("%s (HTTP %d)", s, e.Code)
}

func statusError(resp *http.Response) *StatusError {
	e := &StatusError{
		Code:      resp.StatusCode,
		URL:       logURL(resp.Request.URL),
		ErrorCode: resp.Header.Get("X-Error-Code"),
		Message:   resp.Header.Get("X-Error-Message"),
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			e.RetryAfter = max(time.Until(t), 0)
		}
	}
	return e
}

// explain turns a terminal HTTP status into one line that says what to do.
func (c *Client) explain(err error, repo, rev, file string) error {
	var se *StatusError
	if !errors.As(err, &se) {
		return err
	}
	where := repo + "@" + rev
	switch {
	case se.Code == http.StatusUnauthorized && c.Token == "":
		return fmt.Errorf("%s: authentication required (HTTP 401): the repo is private or gated, or does not exist; set HF_TOKEN to a Hugging Face access token with read access (%s/settings/tokens)", where, c.Endpoint)
	case se.Code == http.StatusUnauthorized:
		return fmt.Errorf("%s: HF_TOKEN was rejected (HTTP 401): it is invalid or expired, or the repo does not exist; create a new read token at %s/settings/tokens", where, c.Endpoint)
	case se.Code == http.StatusForbidden:
		return fmt.Errorf("%s: access denied (HTTP 403): if the repo is gated, accept its terms at %s/%s while logged in as the token's owner; otherwise set HF_TOKEN to a token with read access to it", where, c.Endpoint, repo)
	case se.Code == http.StatusNotFound && se.ErrorCode == "RepoNotFound":
		return fmt.Errorf("repo %s not found (HTTP 404): check --repo", repo)
	case se.Code == http.StatusNotFound && se.ErrorCode == "RevisionNotFound":
		return fmt.Errorf("revision %s not found in %s (HTTP 404): check --revision", rev, repo)
	case se.Code == http.StatusNotFound && file != "":
		return fmt.Errorf("file %s not found in %s (HTTP 404)", file, where)
	case se.Code == http.StatusNotFound:
		return fmt.Errorf("%s not found (HTTP 404): check --repo and --revision", where)
	case se.Code == http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("%s: %s is smaller on the server than the Hub's listing says (HTTP 416)", where, file)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// Errors that the retry loop treats as transient.
var (
	errShortBody = errors.New("response body ended early")
	errStalled   = errors.New("download stalled")
)

// logURL is u for messages: without the query, which on CDN URLs is a signature.
func logURL(u *url.URL) string {
	v := *u
	v.RawQuery, v.User = "", nil
	return v.String()
}

// netError marks a failure of the connection (refused, reset, dropped mid-body): worth a retry.
type netError struct{ err error }

// newNetError wraps err, dropping signed query strings from a *url.Error's URL.
func newNetError(err error) *netError {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			ue.URL = logURL(u)
		}
	}
	return &netError{err}
}

func (e *netError) Error() string { return e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// protocolError is a malformed answer (bad Content-Range, wrong length): a retry may get a good one.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

func retryable(err error) bool {
	var se *StatusError
	var ne *netError
	var pe *protocolError
	var ce *tls.CertificateVerificationError
	switch {
	case errors.As(err, &se):
		return se.Code == http.StatusTooManyRequests || se.Code == http.StatusRequestTimeout || se.Code >= 500
	case errors.As(err, &ce):
		return false // a bad certificate does not fix itself
	case errors.As(err, &ne), errors.As(err, &pe):
		return true
	}
	return errors.Is(err, errShortBody) || errors.Is(err, errStalled)
}

// retry runs op until it succeeds or fails permanently, or has failed Attempts times in a row
// without progress (a request that delivered bytes resets the count, so a long download over a
// flaky link is not abandoned).
func (c *Client) retry(ctx context.Context, what string, op func() (progressed bool, err error)) error {
	fails := 0
	for {
		progressed, err := op()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retryable(err) {
			return err
		}
		if progressed {
			fails = 0
		}
		if fails++; fails >= c.Attempts {
			return fmt.Errorf("%s: giving up after %d attempts: %w", what, fails, err)
		}
		d := c.delay(fails, err)
		c.logf("%s: %v; retry %d/%d in %s", what, err, fails, c.Attempts-1, d.Round(time.Millisecond))
		if c.Retrying != nil {
			c.Retrying(Retry{Reason: RetryReason(err), Err: err, Attempt: fails, Attempts: c.Attempts - 1, Wait: d})
		}
		if err := c.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// Retry is one retry the pull is about to wait for.
type Retry struct {
	Reason            string        // a few words: "HTTP 503", "no data", "connection dropped"
	Err               error         // the failure in full
	Attempt, Attempts int           // this is retry Attempt of at most Attempts in a row without progress
	Wait              time.Duration // until the next attempt
}

// RetryReason names a retryable failure in a few words, for a status line.
func RetryReason(err error) string {
	var se *StatusError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("HTTP %d", se.Code)
	case errors.Is(err, errStalled):
		return "no data"
	case errors.Is(err, errShortBody):
		return "connection dropped"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	}
	var pe *protocolError
	if errors.As(err, &pe) {
		return "bad answer from the server"
	}
	return "network error"
}

// delay is the wait before retry n: the server's Retry-After when it gave one, else exponential
// backoff with jitter so parallel streams do not retry in lockstep.
func (c *Client) delay(n int, err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		return min(se.RetryAfter, c.MaxRetryAfter)
	}
	d := c.MaxBackoff
	if n < 30 {
		d = min(c.Backoff<<(n-1), c.MaxBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// ValidateRepo checks that repo is an "owner/name" Hub id, which also keeps it from steering
// local paths built from it.
func ValidateRepo(repo string) error {
	owner, name, ok := strings.Cut(repo, "/")
	valid := func(s string) bool {
		return s != "" && s != "." && s != ".." && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
	}
	if !ok || !valid(owner) || !valid(name) {
		return fmt.Errorf("repo %q: expected a Hugging Face id like owner/name", repo)
	}
	return nil
}

// escapePath escapes each segment of a slash-separated path for use in a URL.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func (c *Client) resolveURL(repo, rev, file string) string {
	return c.Endpoint + "/" + repo + "/resolve/" + url.PathEscape(rev) + "/" + escapePath(file)
}

type treeEntry struct {
	Type string `json:"type"` // "file" or "directory"
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"` // git blob sha1
	LFS  *struct {
		OID  string `json:"oid"` // sha256 of the content
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// maxListDepth bounds directory nesting in a listing; checkpoints use one or two levels.
const maxListDepth = 32

// List returns the files of repo at rev from the tree API, following Link: rel="next" pages and
// descending into subdirectories. Files are sorted by path.
//
// The listing decides where files are written, so every entry must be a clean path directly
// inside the directory listed (see checkPath) and listed once, and a server that answers with
// a loop (a next page already fetched, a directory inside itself, nesting or pages without
// end) fails the pull with an error rather than keeping it, and `lily serve`, busy forever.
func (c *Client) List(ctx context.Context, repo, rev string) ([]File, error) {
	c = c.withDefaults()
	hc, err := c.httpClient()
	if err != nil {
		return nil, err
	}
	if err := ValidateRepo(repo); err != nil {
		return nil, err
	}
	if rev == "" {
		return nil, errors.New("empty revision")
	}
	l := &lister{c: c, hc: hc, repo: repo, rev: rev, pages: map[string]bool{}, paths: map[string]bool{}}
	for dirs := []string{""}; len(dirs) > 0; dirs = dirs[1:] {
		sub, err := l.dir(ctx, dirs[0])
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, sub...)
	}
	if len(l.files) == 0 {
		return nil, fmt.Errorf("%s@%s: the repo has no files", repo, rev)
	}
	slices.SortFunc(l.files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return l.files, nil
}

// lister is the state of one List: what it has fetched and accepted so far.
type lister struct {
	c         *Client
	hc        *http.Client
	repo, rev string
	pages     map[string]bool // URLs of the pages fetched
	paths     map[string]bool // entries accepted, lower-cased: macOS file systems ignore case
	files     []File
}

// dir lists one directory ("" for the root), page by page, and returns its subdirectories.
func (l *lister) dir(ctx context.Context, dir string) ([]string, error) {
	next := l.c.Endpoint + "/api/models/" + l.repo + "/tree/" + url.PathEscape(l.rev)
	if dir != "" {
		next += "/" + escapePath(dir)
	}
	var subdirs []string
	for next != "" {
		page, n, err := l.page(ctx, next)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if err := l.add(dir, e, &subdirs); err != nil {
				return nil, fmt.Errorf("%s@%s: refusing %q from the Hub listing%s: %w", l.repo, l.rev, e.Path, ofDir(dir), err)
			}
		}
		next = n
	}
	return subdirs, nil
}

func ofDir(dir string) string {
	if dir == "" {
		return ""
	}
	return " of " + dir + "/"
}

// page fetches one page of a listing and returns it with the URL of the next one, if any.
func (l *lister) page(ctx context.Context, u string) (page []treeEntry, next string, err error) {
	if l.pages[u] {
		return nil, "", fmt.Errorf("%s@%s: the listing loops: its Link rel=\"next\" leads back to %s, a page already fetched; the Hub (or the HF_ENDPOINT mirror) is paginating in a circle", l.repo, l.rev, u)
	}
	if len(l.pages) >= l.c.ListPages {
		return nil, "", fmt.Errorf("%s@%s: the listing did not end after %d pages; refusing to fetch more (is the Hub or the HF_ENDPOINT mirror paginating without end?)", l.repo, l.rev, l.c.ListPages)
	}
	l.pages[u] = true
	err = l.c.retry(ctx, "list "+l.repo, func() (bool, error) {
		var err error
		next, err = getJSON(ctx, l.hc, u, &page)
		return false, err
	})
	if err != nil {
		return nil, "", l.c.explain(err, l.repo, l.rev, "")
	}
	return page, next, nil
}

// add accepts e from the listing of dir: a file into l.files, a subdirectory into subdirs.
// Requiring each entry to be a direct child of the directory listed (as the tree API sends
// them) means every file's parent was itself a checked entry, and nesting grows by one level
// per request, so maxListDepth bounds it.
func (l *lister) add(dir string, e treeEntry, subdirs *[]string) error {
	if err := checkPath(e.Path); err != nil {
		return err
	}
	switch parent := path.Dir(e.Path); {
	case e.Path == dir:
		return errors.New("a directory inside itself: the listing loops")
	case parent != cmp.Or(dir, "."):
		return errors.New("not a direct child of the directory listed")
	}
	key := strings.ToLower(e.Path)
	if l.paths[key] {
		return errors.New("listed twice (names that differ only in case count as the same)")
	}
	l.paths[key] = true
	switch e.Type {
	case "directory":
		if depth := strings.Count(e.Path, "/") + 1; depth > maxListDepth {
			return fmt.Errorf("nested %d levels deep, more than the %d Lily follows", depth, maxListDepth)
		}
		*subdirs = append(*subdirs, e.Path)
	case "file":
		f := File{Path: e.Path, Size: e.Size, GitSHA1: e.OID}
		if e.LFS != nil {
			f = File{Path: e.Path, Size: e.LFS.Size, SHA256: e.LFS.OID}
		}
		if f.SHA256 == "" && f.GitSHA1 == "" {
			return errors.New("no checksum")
		}
		l.files = append(l.files, f)
	}
	return nil
}

// getJSON decodes one page of a listing and returns the URL of the next page, if any.
func getJSON(ctx context.Context, hc *http.Client, u string, v any) (next string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", newNetError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", statusError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return "", &netError{fmt.Errorf("GET %s: decoding listing: %w", logURL(resp.Request.URL), err)}
	}
	io.Copy(io.Discard, resp.Body) // let the connection be reused
	return nextLink(resp), nil
}

// nextLink returns the absolute URL of the Link header's rel="next" target, or "".
func nextLink(resp *http.Response) string {
	for _, h := range resp.Header.Values("Link") {
		for _, part := range strings.Split(h, ",") {
			target, params, ok := strings.Cut(part, ";")
			if !ok || !strings.Contains(strings.NewReplacer(" ", "", `"`, "").Replace(params), "rel=next") {
				continue
			}
			target = strings.Trim(strings.TrimSpace(target), "<>")
			if u, err := resp.Request.URL.Parse(target); err == nil {
				return u.String()
			}
		}
	}
	return ""
}
