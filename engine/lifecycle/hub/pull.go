package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/lilyformac/lily/internal/fsutil"
)

// Names Pull keeps next to the checkpoint's files.
const (
	MarkerName = ".lily-complete.json" // written last: the directory is complete and verified
	LockName   = ".lily-pull.lock"     // held while a pull writes into the directory
	PartSuffix = ".part"               // data of a file not yet verified
	SideSuffix = ".part.json"          // which byte ranges of the .part are written and synced
)

// saveEvery bounds how much downloaded data a crash can lose: the sidecar is rewritten (after
// an fsync of the data it describes) at most this often per file, and at every stop.
const saveEvery = time.Second

// partFile is where a download writes; tests substitute one that fails with ENOSPC.
type partFile interface {
	io.WriterAt
	Sync() error
	Close() error
}

func openPartFile(path string, truncate bool) (partFile, error) {
	flags := os.O_RDWR | os.O_CREATE
	if truncate {
		flags |= os.O_TRUNC
	}
	return openNoFollow(path, flags, 0o644)
}

// withDefaults returns a copy with zero-valued settings defaulted, so a Client built by hand
// still works and one Client may serve concurrent pulls.
func (c *Client) withDefaults() *Client {
	d := New()
	cp := *c
	c = &cp
	c.Endpoint = strings.TrimRight(cmp.Or(c.Endpoint, d.Endpoint), "/")
	c.Files = cmp.Or(c.Files, d.Files)
	c.Streams = cmp.Or(c.Streams, d.Streams)
	c.ChunkSize = cmp.Or(c.ChunkSize, d.ChunkSize)
	c.Attempts = cmp.Or(c.Attempts, d.Attempts)
	c.Backoff = cmp.Or(c.Backoff, d.Backoff)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, d.MaxBackoff)
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, d.MaxRetryAfter)
	c.StallTimeout = cmp.Or(c.StallTimeout, d.StallTimeout)
	c.VerifyAttempts = cmp.Or(c.VerifyAttempts, d.VerifyAttempts)
	c.ListPages = cmp.Or(c.ListPages, d.ListPages)
	c.ProgressInterval = cmp.Or(c.ProgressInterval, d.ProgressInterval)
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
	if c.openPart == nil {
		c.openPart = openPartFile
	}
	if c.freeSpace == nil {
		c.freeSpace = fsutil.FreeSpace
	}
	return c
}

// Result is what PullWith checked and did, for the line a command prints at the end.
type Result struct {
	Marker *Marker
	Check  Check
	// With CheckHashes: files already on disk that were re-hashed and kept; files downloaded,
	// each verified before it was put in place; the bytes this run transferred (a resumed file
	// counts only the rest); and Replaced, the files found on disk at full size whose re-hash
	// failed, which are among those downloaded.
	Hashed, Downloaded int
	Bytes              int64
	Replaced           []string
}

// Check is how PullWith established that the directory is complete.
type Check int

const (
	// CheckMarker: the marker records repo@rev and each file it lists has its recorded size.
	// No request is made: rev is a commit id, so its listing cannot have changed.
	CheckMarker Check = iota + 1
	// CheckListing: as CheckMarker, and the marker's files equal the Hub's current listing.
	CheckListing
	// CheckHashes: every file's checksum was compared with the Hub's listing, those downloaded
	// before being renamed into place and those already on disk by re-hashing them.
	CheckHashes
)

// Pull is PullWith in VerifyFast mode, for callers that need only the marker.
func (c *Client) Pull(ctx context.Context, repo, rev, dir string) (*Marker, error) {
	r, err := c.PullWith(ctx, repo, rev, dir, VerifyFast)
	if err != nil {
		return nil, err
	}
	return r.Marker, nil
}

// PullWith makes dir a verified copy of repo at rev and says how. It is idempotent: in
// VerifyFast mode a complete directory returns at once (CheckMarker or CheckListing), a partial
// one is resumed, and files already in place are re-hashed rather than downloaded again. In
// VerifyFull mode every file is re-hashed even when the directory is complete, and any that
// does not match is downloaded again.
//
// Locking: a pull holds an exclusive lock on dir/.lily-pull.lock. A second pull into the same
// directory (another terminal, or the server's pull-if-missing phase) waits for the first,
// saying so through Logf, then finds the files in place and returns; cancel ctx to stop waiting.
// Waiting rather than failing lets `lily serve` start while `lily pull` is still running.
//
// Symlinks inside dir are refused (ErrSymlink), never followed or replaced; dir itself may be one.
func (c *Client) PullWith(ctx context.Context, repo, rev, dir string, mode VerifyMode) (*Result, error) {
	c = c.withDefaults()
	hc, err := c.httpClient()
	if err != nil {
		return nil, err
	}
	if err := ValidateRepo(repo); err != nil {
		return nil, err
	}
	unlock, err := c.lock(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if mode == VerifyFast && isCommit(rev) {
		if m, err := c.complete(ctx, dir, repo, rev, nil); err == nil {
			return &Result{Marker: m, Check: CheckMarker}, nil
		}
	}
	files, err := c.List(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	if mode == VerifyFast {
		if m, err := c.complete(ctx, dir, repo, rev, files); err == nil {
			return &Result{Marker: m, Check: CheckListing}, nil
		}
	}
	// The directory is about to change: an interrupted pull must not leave it looking complete.
	if err := os.Remove(filepath.Join(dir, MarkerName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return c.pullFiles(ctx, hc, repo, rev, dir, files, mode == VerifyFull)
}

// lock creates dir and takes its pull lock, waiting for another pull that holds it.
func (c *Client) lock(ctx context.Context, dir string) (unlock func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := refuseLinks(dir, LockName, MarkerName); err != nil {
		return nil, err
	}
	lock := flock.New(filepath.Join(dir, LockName))
	ok, err := lock.TryLock()
	if err == nil && !ok {
		c.logf("another lily pull is writing to %s; waiting for it to finish", dir)
		ok, err = lock.TryLockContext(ctx, 100*time.Millisecond)
	}
	if err != nil || !ok {
		return nil, fmt.Errorf("lock %s: %w", lock.Path(), cmp.Or(err, ctx.Err()))
	}
	return lock.Unlock, nil
}

// pullFiles brings every file of the listing into place and writes the marker. With
// hashProgress, files already in place count as progress while they are re-hashed rather than
// as on disk from the start, so a full verification shows how far it is.
func (c *Client) pullFiles(ctx context.Context, hc *http.Client, repo, rev, dir string, files []File, hashProgress bool) (*Result, error) {
	jobs := make([]*fileJob, len(files))
	var total, onDisk, toHash int64
	for i, f := range files {
		j, err := newFileJob(dir, f, c.ChunkSize)
		if err != nil {
			return nil, err
		}
		j.hashProgress = hashProgress && j.inPlace
		if j.hashProgress {
			toHash += f.Size
		}
		jobs[i] = j
		total += f.Size
		onDisk += j.onDisk()
	}
	if err := c.checkSpace(dir, total-onDisk); err != nil {
		return nil, err
	}
	tr := &tracker{total: total, start: onDisk - toHash, files: len(files)}
	tr.done.Store(onDisk - toHash)
	stop := reportEvery(c.ProgressInterval, c.Progress, tr)
	defer stop()
	if err := c.pullAll(ctx, hc, repo, rev, jobs, tr); err != nil {
		return nil, err
	}
	m := &Marker{Repo: repo, Revision: rev, Files: files, CompletedAt: time.Now().UTC()}
	if err := writeMarker(dir, m); err != nil {
		return nil, err
	}
	return tr.result(m), nil
}

// complete returns dir's marker if it records repo@rev (and exactly files, when given) and the
// files on disk have the recorded sizes.
func (c *Client) complete(ctx context.Context, dir, repo, rev string, files []File) (*Marker, error) {
	m, err := Verify(ctx, dir, VerifyFast, nil)
	if err != nil {
		return nil, err
	}
	if m.Repo != repo || m.Revision != rev || (files != nil && !slices.Equal(m.Files, files)) {
		return nil, fmt.Errorf("%s holds %s@%s", dir, m.Repo, m.Revision)
	}
	if c.Progress != nil {
		c.Progress(Progress{Done: m.Size(), Total: m.Size(), Start: m.Size(), FilesDone: len(m.Files), Files: len(m.Files)})
	}
	return m, nil
}

func isCommit(rev string) bool {
	if len(rev) != 40 {
		return false
	}
	for _, r := range rev {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

func (c *Client) checkSpace(dir string, need int64) error {
	if need <= 0 {
		return nil
	}
	free, err := c.freeSpace(dir)
	if err != nil {
		c.logf("cannot check free disk space at %s: %v", dir, err)
		return nil
	}
	if uint64(need) > free {
		return fmt.Errorf("not enough disk space at %s: the download needs %s, only %s is free; free up %s or choose another disk with --dir",
			dir, FormatBytes(need), FormatBytes(int64(free)), FormatBytes(need-int64(free)))
	}
	return nil
}

// pullAll runs the file jobs, Files at a time, sharing Streams ranged requests among them. The
// first failure cancels the rest; everything written so far stays resumable.
func (c *Client) pullAll(ctx context.Context, hc *http.Client, repo, rev string, jobs []*fileJob, tr *tracker) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fileSlots := make(chan struct{}, c.Files)
	streams := make(chan struct{}, c.Streams)
	var wg sync.WaitGroup
	for _, j := range jobs {
		if acquire(ctx, fileSlots) != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-fileSlots }()
			if err := c.pullFile(ctx, hc, repo, rev, j, tr, streams); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func acquire(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pullFile brings one file into place, downloading it again (up to VerifyAttempts times) when
// the downloaded bytes do not match the listing's checksum.
func (c *Client) pullFile(ctx context.Context, hc *http.Client, repo, rev string, j *fileJob, tr *tracker, streams chan struct{}) error {
	if j.inPlace {
		if kept, err := c.keepInPlace(ctx, j, tr); kept || err != nil {
			return err
		}
	}
	u := c.resolveURL(repo, rev, j.f.Path)
	for attempt := 1; ; attempt++ {
		err := c.download(ctx, hc, u, j, tr, streams)
		if err == nil {
			err = j.commit(ctx)
		}
		if err == nil {
			tr.downloaded(j.f)
			return nil
		}
		if !errors.Is(err, ErrMismatch) {
			return c.explain(err, repo, rev, j.f.Path)
		}
		tr.add(-j.f.Size, "")
		if derr := j.discard(); derr != nil {
			return derr
		}
		if attempt >= c.VerifyAttempts {
			return fmt.Errorf("%s@%s: %w; gave up after %d downloads", repo, rev, err, attempt)
		}
		c.logf("%v; downloading it again", err)
	}
}

// keepInPlace re-hashes a file already at its final name and says whether it can stay. Only
// verified files are ever renamed into place, but this one may be from another revision or
// damaged since: re-hashing it costs a read, not a download. A file that fails is logged and
// left for the caller to download again.
func (c *Client) keepInPlace(ctx context.Context, j *fileJob, tr *tracker) (bool, error) {
	counted := j.f.Size // counted as on disk from the start, unless hashing reports progress
	var count func(int64)
	if j.hashProgress {
		counted = 0
		count = func(n int64) { counted += n; tr.add(n, j.f.Path) }
	}
	err := checkFile(ctx, j.final, j.f, count)
	switch {
	case err == nil:
		os.Remove(j.side) // left behind by a crash between rename and cleanup
		tr.hashed.Add(1)
		tr.fileDone(j.f.Path)
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, ErrSymlink):
		return false, err
	}
	tr.add(-counted, "")
	tr.failedRehash(j.f.Path)
	c.logf("%v; downloading it again", err)
	return false, nil
}

// download fetches the missing ranges of j into its .part file.
func (c *Client) download(ctx context.Context, hc *http.Client, u string, j *fileJob, tr *tracker, streams chan struct{}) error {
	if err := j.open(c.openPart); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i := range j.st.Done {
		if j.missing(i) == 0 {
			continue
		}
		if acquire(ctx, streams) != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-streams }()
			err := c.retry(ctx, j.f.Path, func() (progressed bool, err error) {
				// A server may answer fewer bytes than asked (a shorter 206): ask for the rest.
				for off, end := j.span(i); off < end; off, end = j.span(i) {
					n, err := c.fetch(ctx, hc, u, off, end, j.f.Size, func(p []byte, at int64) error {
						return j.write(i, p, at, tr)
					})
					progressed = progressed || n > 0
					if err == nil && n == 0 {
						err = errShortBody
					}
					if err != nil {
						return progressed, err
					}
				}
				return progressed, nil
			})
			if err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := j.close(); err != nil {
		cancel(err)
	}
	return context.Cause(ctx)
}

// fetch copies bytes [off, end) of a remote file of the given size into w at the same offsets,
// or a prefix of them if the server answers a shorter range. It returns how many bytes it
// delivered, also when it fails part-way, so the caller resumes from there. Servers that
// ignore Range are tolerated by skipping the prefix.
func (c *Client) fetch(ctx context.Context, hc *http.Client, u string, off, end, size int64, w func(p []byte, at int64) error) (int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end-1))
	resp, err := hc.Do(req)
	if err != nil {
		return 0, newNetError(err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, last, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || start != off || last < start || total != size {
			return 0, &protocolError{fmt.Sprintf("GET %s: Content-Range %q does not answer bytes %d-%d of %d",
				logURL(resp.Request.URL), resp.Header.Get("Content-Range"), off, end-1, size)}
		}
		end = min(end, last+1)
	case http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength != size {
			return 0, &protocolError{fmt.Sprintf("GET %s: Content-Length %d, but the listing says %d bytes",
				logURL(resp.Request.URL), resp.ContentLength, size)}
		}
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return 0, &netError{fmt.Errorf("GET %s: %w", logURL(resp.Request.URL), err)}
		}
	default:
		return 0, statusError(resp)
	}

	stall := time.AfterFunc(c.StallTimeout, func() { cancel(errStalled) })
	defer stall.Stop()
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	buf := *bufp
	var n int64
	for n < end-off {
		m, rerr := resp.Body.Read(buf[:min(int64(len(buf)), end-off-n)])
		if m > 0 {
			stall.Reset(c.StallTimeout)
			if err := w(buf[:m], off+n); err != nil {
				return n, err
			}
			n += int64(m)
		}
		switch {
		case rerr == io.EOF && n < end-off:
			return n, fmt.Errorf("GET %s: got %d of %d bytes: %w", logURL(resp.Request.URL), n, end-off, errShortBody)
		case rerr != nil && rerr != io.EOF:
			if errors.Is(context.Cause(ctx), errStalled) {
				return n, fmt.Errorf("GET %s: no data for %s: %w", logURL(resp.Request.URL), c.StallTimeout, errStalled)
			}
			return n, &netError{fmt.Errorf("GET %s: %w", logURL(resp.Request.URL), rerr)}
		}
	}
	return n, nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// parseContentRange parses "bytes START-LAST/TOTAL".
func parseContentRange(s string) (start, last, total int64, err error) {
	r, ok := strings.CutPrefix(s, "bytes ")
	span, tot, ok2 := strings.Cut(r, "/")
	first, lastS, ok3 := strings.Cut(span, "-")
	if !ok || !ok2 || !ok3 {
		return 0, 0, 0, fmt.Errorf("malformed Content-Range %q", s)
	}
	start, err = strconv.ParseInt(first, 10, 64)
	if err == nil {
		last, err = strconv.ParseInt(lastS, 10, 64)
	}
	if err == nil {
		total, err = strconv.ParseInt(tot, 10, 64)
	}
	return start, last, total, err
}

// partState is the sidecar of a .part file: how many bytes from the start of each chunk are
// written and synced. It names the content it belongs to, so data of another revision is
// never resumed into this one.
type partState struct {
	Size      int64   `json:"size"`
	Hash      string  `json:"hash"`
	ChunkSize int64   `json:"chunk_size"`
	Done      []int64 `json:"done"`
}

type fileJob struct {
	f                 File
	final, part, side string
	chunkSize         int64
	inPlace           bool // a file of the right size is at the final name
	hashProgress      bool // re-hashing it in place counts as progress (a full verification)
	st                *partState
	w                 partFile
	mu                sync.Mutex // guards st.Done and saved
	saved             time.Time
	saveMu            sync.Mutex // orders sidecar writes
}

// newFileJob looks at what dir already holds of f: the file at its final name, or a resumable
// .part. It refuses symlinks on the way to any of the three names, so nothing below reads or
// writes through one.
func newFileJob(dir string, f File, chunkSize int64) (*fileJob, error) {
	if err := refuseLinks(dir, f.Path, f.Path+PartSuffix, f.Path+SideSuffix); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, filepath.FromSlash(f.Path))
	j := &fileJob{f: f, final: final, part: final + PartSuffix, side: final + SideSuffix, chunkSize: chunkSize}
	if fi, err := os.Lstat(final); err == nil && fi.Mode().IsRegular() && fi.Size() == f.Size {
		j.inPlace = true
		return j, nil
	}
	j.st = loadPartState(j.part, j.side, f)
	return j, nil
}

// onDisk is how many of the file's bytes a pull will not need to transfer (if they check out).
func (j *fileJob) onDisk() int64 {
	if j.inPlace {
		return j.f.Size
	}
	var n int64
	if j.st != nil {
		for _, d := range j.st.Done {
			n += d
		}
	}
	return n
}

func (f File) hash() string { return cmp.Or(f.SHA256, f.GitSHA1) }

func loadPartState(part, side string, f File) *partState {
	raw, err := readNoFollow(side)
	if err != nil {
		return nil
	}
	var st partState
	fi, err := os.Stat(part)
	if err != nil || json.Unmarshal(raw, &st) != nil || st.Size != f.Size || st.Hash != f.hash() || !st.valid(fi.Size()) {
		return nil
	}
	return &st
}

// valid says whether the sidecar is self-consistent and claims no byte beyond its .part file's
// partSize.
func (st *partState) valid(partSize int64) bool {
	if st.Size < 0 || st.ChunkSize <= 0 || len(st.Done) != chunks(st.Size, st.ChunkSize) {
		return false
	}
	for i, d := range st.Done {
		start := int64(i) * st.ChunkSize
		if d < 0 || d > min(st.ChunkSize, st.Size-start) || (d > 0 && start+d > partSize) {
			return false
		}
	}
	return true
}

// OnDisk estimates how many bytes of a checkpoint dir already holds that a resumed pull would
// not download again, without the Hub's listing (so without the network): a file at its final
// name counts whole, a .part file the bytes its sidecar records, Lily's own files nothing. It is
// for a free-space check made before the pull; the pull checks exactly, against the listing.
// Symlinks are not followed (a pull refuses them); a dir that does not exist holds 0 bytes.
func OnDisk(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // unreadable entries and directories: walk on; links: not followed
		}
		name := d.Name()
		switch {
		case strings.HasPrefix(name, ".lily-"), strings.HasSuffix(name, SideSuffix):
		case strings.HasSuffix(name, PartSuffix):
			n += partDone(p)
		default:
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// partDone is the bytes a .part file's sidecar records as written and synced (0 without a
// valid sidecar: a resumed pull starts that file afresh).
func partDone(part string) int64 {
	raw, err := readNoFollow(strings.TrimSuffix(part, PartSuffix) + SideSuffix)
	if err != nil {
		return 0
	}
	var st partState
	fi, err := os.Lstat(part)
	if err != nil || json.Unmarshal(raw, &st) != nil || !st.valid(fi.Size()) {
		return 0
	}
	var n int64
	for _, d := range st.Done {
		n += d
	}
	return n
}

func chunks(size, chunkSize int64) int { return int((size + chunkSize - 1) / chunkSize) }

// span is the byte range of chunk i still to fetch.
func (j *fileJob) span(i int) (off, end int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	start := int64(i) * j.st.ChunkSize
	return start + j.st.Done[i], min(start+j.st.ChunkSize, j.f.Size)
}

func (j *fileJob) missing(i int) int64 { off, end := j.span(i); return end - off }

// open prepares the .part file: resumed as the sidecar describes, or started afresh with a
// sidecar written before any data so that a .part never exists without one.
func (j *fileJob) open(openPart func(string, bool) (partFile, error)) error {
	if err := os.MkdirAll(filepath.Dir(j.final), 0o755); err != nil {
		return err
	}
	fresh := j.st == nil
	if fresh {
		j.st = &partState{Size: j.f.Size, Hash: j.f.hash(), ChunkSize: j.chunkSize, Done: make([]int64, chunks(j.f.Size, j.chunkSize))}
	}
	w, err := openPart(j.part, fresh)
	if err != nil {
		return err
	}
	j.w = w
	if fresh {
		return j.save()
	}
	return nil
}

// write stores p at offset at, as part of chunk i, and accounts for it.
func (j *fileJob) write(i int, p []byte, at int64, tr *tracker) error {
	if _, err := j.w.WriteAt(p, at); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("disk full while writing %s: %w; free up space and run the pull again, it resumes where it stopped", j.part, err)
		}
		return fmt.Errorf("writing %s: %w", j.part, err)
	}
	j.mu.Lock()
	j.st.Done[i] += int64(len(p))
	due := time.Since(j.saved) >= saveEvery
	j.mu.Unlock()
	tr.add(int64(len(p)), j.f.Path)
	tr.fetchedBytes.Add(int64(len(p)))
	if due {
		return j.save()
	}
	return nil
}

// save makes the data written so far durable and then records it in the sidecar. The counts
// are read before the fsync, so the sidecar never claims bytes that are not on disk.
func (j *fileJob) save() error {
	j.saveMu.Lock()
	defer j.saveMu.Unlock()
	j.mu.Lock()
	st := *j.st
	st.Done = append([]int64(nil), j.st.Done...)
	j.saved = time.Now()
	j.mu.Unlock()
	if err := j.w.Sync(); err != nil {
		return err
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(j.side, raw, 0o644)
}

func (j *fileJob) close() error {
	if j.w == nil {
		return nil
	}
	err := j.save()
	if cerr := j.w.Close(); err == nil {
		err = cerr
	}
	j.w = nil
	return err
}

// commit verifies the complete .part and renames it into place: data fsynced (by close), rename,
// directory fsynced. A file that fails verification never reaches its final name.
func (j *fileJob) commit(ctx context.Context) error {
	if err := checkFile(ctx, j.part, j.f, nil); err != nil {
		return err
	}
	if err := os.Rename(j.part, j.final); err != nil {
		return err
	}
	if err := fsutil.SyncDir(filepath.Dir(j.final)); err != nil {
		return err
	}
	os.Remove(j.side)
	return nil
}

// discard forgets a .part whose content failed verification: which bytes are bad is unknown.
func (j *fileJob) discard() error {
	j.st = nil
	for _, p := range []string{j.side, j.part} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// tracker aggregates progress from all streams, which reportEvery publishes, and what the
// pull did, which result reports.
type tracker struct {
	total, start int64
	files        int
	done         atomic.Int64
	filesDone    atomic.Int64
	file         atomic.Pointer[string]

	hashed, fetchedFiles, fetchedBytes atomic.Int64
	mu                                 sync.Mutex
	replaced                           []string
}

func (t *tracker) downloaded(f File) {
	t.fetchedFiles.Add(1)
	t.fileDone(f.Path)
}

func (t *tracker) failedRehash(file string) {
	t.mu.Lock()
	t.replaced = append(t.replaced, file)
	t.mu.Unlock()
}

func (t *tracker) result(m *Marker) *Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &Result{Marker: m, Check: CheckHashes, Hashed: int(t.hashed.Load()), Downloaded: int(t.fetchedFiles.Load()),
		Bytes: t.fetchedBytes.Load(), Replaced: slices.Sorted(slices.Values(t.replaced))}
}

func (t *tracker) add(n int64, file string) {
	t.done.Add(n)
	if file != "" {
		t.file.Store(&file)
	}
}

func (t *tracker) fileDone(file string) {
	t.filesDone.Add(1)
	t.file.Store(&file)
}

func (t *tracker) snapshot() Progress {
	p := Progress{Done: t.done.Load(), Total: t.total, Start: t.start, FilesDone: int(t.filesDone.Load()), Files: t.files}
	if f := t.file.Load(); f != nil {
		p.File = *f
	}
	return p
}

// reportEvery calls fn with tr's snapshot now, every interval, and once more when stopped.
func reportEvery(interval time.Duration, fn func(Progress), tr *tracker) (stop func()) {
	if fn == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			fn(tr.snapshot())
			select {
			case <-t.C:
			case <-done:
				fn(tr.snapshot())
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// FormatBytes renders n in decimal units, as Finder does ("19.4 GB").
func FormatBytes(n int64) string {
	const unit = 1000
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for ; (f >= unit || f <= -unit) && i < 4; i++ {
		f /= unit
	}
	return fmt.Sprintf("%.1f %cB", f, "kMGTP"[i-1])
}
