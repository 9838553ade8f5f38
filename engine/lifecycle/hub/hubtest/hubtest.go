// Package hubtest is a fake Hugging Face Hub for tests: the tree API (paginated through Link
// headers, with subdirectories), resolve with Range support, and a second server standing in for
// the CDN that LFS downloads are redirected to. A Fault hook lets a test break any request, and a
// Tree hook rewrite any directory's listing.
package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Call describes a request about to be answered.
type Call struct {
	Server string // "hub" or "cdn"
	Kind   string // "tree" or "file"
	File   string // for "file": the file's path in the repo
	Data   []byte // for "file": its content
	Auth   string // the Authorization header received
	Range  string // the Range header received
}

// Hub is the fake. Set the exported fields before the first request.
type Hub struct {
	Repo, Revision string
	Files          map[string][]byte
	LFSMin         int    // files at least this large are LFS: sha256-listed, redirected to the CDN
	PageSize       int    // tree entries per page
	Token          string // if set, hub requests need "Bearer <Token>": none → 401, another → 403

	// Fault, if set, sees every call first; returning true means it wrote the answer itself.
	Fault func(c Call, w http.ResponseWriter, r *http.Request) bool
	// Tree, if set, rewrites the entries of directory dir ("" for the root) before they are
	// paginated: a test adds entries no real file tree has (".", a directory inside itself).
	Tree func(dir string, entries []Entry) []Entry

	HubServer, CDNServer *httptest.Server

	served atomic.Int64 // file content bytes written to clients
	mu     sync.Mutex
	calls  []Call
}

// New starts a fake hub serving files as repo at rev; both servers close when the test ends.
func New(t testing.TB, repo, rev string, files map[string][]byte) *Hub {
	h := &Hub{Repo: repo, Revision: rev, Files: files, LFSMin: 1024, PageSize: 3}
	api, resolve := http.NewServeMux(), http.NewServeMux() // one mux would see the patterns overlap
	api.HandleFunc("GET /api/models/{org}/{name}/tree/{rev}", h.tree)
	api.HandleFunc("GET /api/models/{org}/{name}/tree/{rev}/{dir...}", h.tree)
	resolve.HandleFunc("GET /{org}/{name}/resolve/{rev}/{file...}", h.resolve)
	h.HubServer = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			api.ServeHTTP(w, r)
		} else {
			resolve.ServeHTTP(w, r)
		}
	}))
	cdn := http.NewServeMux()
	cdn.HandleFunc("GET /blobs/{sha}", h.blob)
	h.CDNServer = httptest.NewServer(cdn)
	t.Cleanup(func() { h.HubServer.Close(); h.CDNServer.Close() })
	return h
}

// URL is the hub's endpoint (what HF_ENDPOINT would be).
func (h *Hub) URL() string { return h.HubServer.URL }

// Served is the number of file content bytes sent so far, over both servers.
func (h *Hub) Served() int64 { return h.served.Load() }

// ResetServed zeroes the byte counter and the call log.
func (h *Hub) ResetServed() {
	h.served.Store(0)
	h.mu.Lock()
	h.calls = nil
	h.mu.Unlock()
}

// Calls returns the calls seen so far.
func (h *Hub) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// TotalSize is the sum of the file sizes.
func (h *Hub) TotalSize() int64 {
	var n int64
	for _, d := range h.Files {
		n += int64(len(d))
	}
	return n
}

func (h *Hub) isLFS(p string) bool { return len(h.Files[p]) >= h.LFSMin }

// SHA256 and GitSHA1 are the checksums the listing gives for a content.
func SHA256(d []byte) string { s := sha256.Sum256(d); return hex.EncodeToString(s[:]) }

func GitSHA1(d []byte) string {
	s := sha1.Sum(append([]byte(fmt.Sprintf("blob %d\x00", len(d))), d...))
	return hex.EncodeToString(s[:])
}

func (h *Hub) record(c Call, w http.ResponseWriter, r *http.Request) bool {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	return h.Fault != nil && h.Fault(c, w, r)
}

// authorize answers like the Hub: 401 without a token, 403 with the wrong one, 404 for an
// unknown repo or revision.
func (h *Hub) authorize(w http.ResponseWriter, r *http.Request) bool {
	if h.Token != "" {
		switch r.Header.Get("Authorization") {
		case "Bearer " + h.Token:
		case "":
			http.Error(w, "Invalid credentials", http.StatusUnauthorized)
			return false
		default:
			w.Header().Set("X-Error-Code", "GatedRepo")
			http.Error(w, "Access restricted", http.StatusForbidden)
			return false
		}
	}
	if r.PathValue("org")+"/"+r.PathValue("name") != h.Repo {
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, "Repository not found", http.StatusNotFound)
		return false
	}
	if r.PathValue("rev") != h.Revision {
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, "Invalid rev id", http.StatusNotFound)
		return false
	}
	return true
}

// LFSInfo is the lfs member of a tree entry.
type LFSInfo struct {
	OID  string `json:"oid"`
	Size int    `json:"size"`
}

// Entry is one entry of a tree listing, as the Hub's API sends it.
type Entry struct {
	Type string   `json:"type"` // "file" or "directory"
	Path string   `json:"path"`
	Size int      `json:"size"`
	OID  string   `json:"oid"`
	LFS  *LFSInfo `json:"lfs,omitempty"`
}

func (h *Hub) tree(w http.ResponseWriter, r *http.Request) {
	if h.record(Call{Server: "hub", Kind: "tree", Auth: r.Header.Get("Authorization")}, w, r) || !h.authorize(w, r) {
		return
	}
	dir := r.PathValue("dir")
	var entries []Entry
	seen := map[string]bool{}
	for p, d := range h.Files {
		parent := path.Dir(p)
		if parent == "." {
			parent = ""
		}
		if parent == dir {
			e := Entry{Type: "file", Path: p, Size: len(d), OID: GitSHA1(d)}
			if h.isLFS(p) {
				pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", SHA256(d), len(d))
				e.Size, e.OID, e.LFS = len(pointer), GitSHA1([]byte(pointer)), &LFSInfo{OID: SHA256(d), Size: len(d)}
			}
			entries = append(entries, e)
			continue
		}
		// An immediate subdirectory of dir on the way to p.
		if rest, ok := strings.CutPrefix(p, dir); ok && (dir == "" || strings.HasPrefix(rest, "/")) {
			sub, _, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
			if d := path.Join(dir, sub); !seen[d] {
				seen[d] = true
				entries = append(entries, Entry{Type: "directory", Path: d, OID: "0"})
			}
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	if h.Tree != nil {
		entries = h.Tree(dir, entries)
	}
	cursor, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	end := min(cursor+h.PageSize, len(entries))
	if end < len(entries) {
		next := *r.URL
		next.RawQuery = url.Values{"cursor": {strconv.Itoa(end)}}.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, h.HubServer.URL, next.RequestURI()))
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(entries[min(cursor, len(entries)):end])
}

func (h *Hub) resolve(w http.ResponseWriter, r *http.Request) {
	file := r.PathValue("file")
	data, ok := h.Files[file]
	c := Call{Server: "hub", Kind: "file", File: file, Data: data, Auth: r.Header.Get("Authorization"), Range: r.Header.Get("Range")}
	if h.record(c, w, r) || !h.authorize(w, r) {
		return
	}
	if !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	if h.isLFS(file) {
		http.Redirect(w, r, h.CDNServer.URL+"/blobs/"+SHA256(data)+"?expires=1", http.StatusFound)
		return
	}
	h.Serve(w, r, data)
}

func (h *Hub) blob(w http.ResponseWriter, r *http.Request) {
	for p, d := range h.Files {
		if SHA256(d) == r.PathValue("sha") {
			c := Call{Server: "cdn", Kind: "file", File: p, Data: d, Auth: r.Header.Get("Authorization"), Range: r.Header.Get("Range")}
			if !h.record(c, w, r) {
				h.Serve(w, r, d)
			}
			return
		}
	}
	http.NotFound(w, r)
}

// Serve answers r with data, honouring Range, and counts the body bytes.
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, data []byte) {
	http.ServeContent(&countingWriter{ResponseWriter: w, n: &h.served}, r, "", time.Time{}, bytes.NewReader(data))
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

// Write counts p before writing it, then takes back what was not written: a client can have
// read the bytes (and a pull returned) before the write returns here, and Served read then must
// already include them.
func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n - len(p)))
	return n, err
}

// requestedRange parses "bytes=a-b" (b optional) against a content of the given size.
func requestedRange(r *http.Request, size int) (start, end int) {
	start, end = 0, size-1
	if s, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes="); ok {
		a, b, _ := strings.Cut(s, "-")
		start, _ = strconv.Atoi(a)
		if b != "" {
			end, _ = strconv.Atoi(b)
		}
	}
	return start, min(end, size-1)
}

// Drop answers the requested range of data with a correct header, then closes the connection
// after n body bytes, as a dropped connection would.
func (h *Hub) Drop(w http.ResponseWriter, r *http.Request, data []byte, n int) {
	start, end := requestedRange(r, len(data))
	n = min(n, end-start+1)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n", start, end, len(data), end-start+1)
	buf.Write(data[start : start+n])
	buf.Flush()
	h.served.Add(int64(n))
}

// Short answers the requested range with a Content-Length (and body) of only n bytes: the
// response ends cleanly but early.
func (h *Hub) Short(w http.ResponseWriter, r *http.Request, data []byte, n int) {
	start, end := requestedRange(r, len(data))
	n = min(n, end-start+1)
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(data)))
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusPartialContent)
	h.served.Add(int64(n)) // before the write, as countingWriter does
	m, _ := w.Write(data[start : start+n])
	h.served.Add(int64(m - n))
}
