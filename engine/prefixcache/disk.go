package prefixcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lilyformac/lily/engine/backend"
)

// Disk is the prefix cache's tier on disk, so conversations survive a restart. The snapshots the
// engine loop saves where requests are likely to diverge (its checkpoints, generation ends) are
// also written here, in the background; a prompt whose longest cached prefix is only on disk —
// after a restart, or once memory evicted it — is restored from the file instead of prefilled.
// A file is written to a temporary name, synced and renamed; it carries the model's identity and
// a SHA-256 of its contents, and one of another identity, or that does not check out, is
// deleted, never loaded. Least recently used files go first when the budget is exceeded.
type Disk struct {
	dir      string
	budget   int64
	identity [32]byte

	mu      sync.Mutex
	entries map[string]*DiskEntry // by file name
	used    int64

	jobs                        chan diskJob
	pending                     sync.WaitGroup
	done                        chan struct{}
	writes, loads, dropped, bad atomic.Int64
	writeErr                    atomic.Pointer[error]
	closeOnce                   sync.Once
}

// Identity is what a snapshot file belongs to: files of any other identity are foreign.
type Identity struct {
	Model   string // repo@revision of a pulled checkpoint, else its directory
	Config  string // a hash of config.json
	Backend string // the backend's name and KV cache format: each encodes its own state layout
}

func (id Identity) sum() [32]byte {
	return sha256.Sum256([]byte("lily prefix cache 1\n" + id.Model + "\n" + id.Config + "\n" + id.Backend))
}

// DiskEntry is a snapshot file in the index.
type DiskEntry struct {
	Tokens []int // what the snapshot consumed
	name   string
	size   int64
	used   time.Time
}

type diskJob struct {
	tokens []int
	data   []byte
	logits []float32
}

const (
	snapMagic   = "LILYSNP1"
	snapHeader  = 8 + 32 + 4 + 4 + 4 + 8 // magic, identity, tokens, logits, pos, payload length
	snapSuffix  = ".snap"
	tmpPrefix   = ".tmp-"
	maxQueued   = 2 // writes waiting; more are dropped (the entry stays in memory only)
	maxSnapToks = 1 << 24
)

// OpenDisk opens (creating it) the cache directory dir for snapshots of identity id within budget
// bytes. It deletes what no longer belongs there: half-written temporary files, files of another
// identity and files it cannot read.
func OpenDisk(dir string, budget int64, id Identity) (*Disk, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("prefix cache on disk: %w", err)
	}
	d := &Disk{dir: dir, budget: budget, identity: id.sum(), entries: map[string]*DiskEntry{},
		jobs: make(chan diskJob, maxQueued), done: make(chan struct{})}
	if err := d.scan(); err != nil {
		return nil, fmt.Errorf("prefix cache on disk: %w", err)
	}
	d.mu.Lock()
	d.evictLocked()
	d.mu.Unlock()
	go d.writer()
	return d, nil
}

// scan indexes the directory's snapshot files and deletes everything else Lily wrote there.
func (d *Disk) scan() error {
	des, err := os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(d.dir, name)
		if strings.HasPrefix(name, tmpPrefix) {
			os.Remove(path) // a write that did not finish
			continue
		}
		if !strings.HasSuffix(name, snapSuffix) || !de.Type().IsRegular() {
			continue
		}
		e, err := d.readHeader(path)
		if err != nil {
			d.bad.Add(1)
			os.Remove(path)
			continue
		}
		d.entries[name] = e
		d.used += e.size
	}
	return nil
}

// readHeader reads a file's identity and tokens, refusing one of another identity or whose
// length does not match its header.
func (d *Disk) readHeader(path string) (*DiskEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var h [snapHeader]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return nil, err
	}
	nt, _, _, err := d.checkHeader(h[:], fi.Size())
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 4*nt)
	if _, err := io.ReadFull(f, raw); err != nil {
		return nil, err
	}
	return &DiskEntry{Tokens: u32s(raw), name: filepath.Base(path), size: fi.Size(), used: fi.ModTime()}, nil
}

// checkHeader validates a header against the identity and the file's size.
func (d *Disk) checkHeader(h []byte, size int64) (tokens, logits int, payload int64, err error) {
	if string(h[:8]) != snapMagic || !bytes.Equal(h[8:40], d.identity[:]) {
		return 0, 0, 0, errors.New("not a snapshot of this model and backend")
	}
	tokens, logits = int(binary.LittleEndian.Uint32(h[40:])), int(binary.LittleEndian.Uint32(h[44:]))
	payload = int64(binary.LittleEndian.Uint64(h[52:]))
	if tokens < 1 || tokens > maxSnapToks || logits > maxSnapToks || payload < 0 ||
		size != snapHeader+4*int64(tokens)+4*int64(logits)+payload+sha256.Size {
		return 0, 0, 0, errors.New("truncated or malformed")
	}
	return tokens, logits, payload, nil
}

// Longest returns the entry with the longest token sequence that prefixes prompt, or nil.
func (d *Disk) Longest(prompt []int) *DiskEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	var best *DiskEntry
	for _, e := range d.entries {
		if len(e.Tokens) <= len(prompt) && (best == nil || len(e.Tokens) > len(best.Tokens)) && slices.Equal(e.Tokens, prompt[:len(e.Tokens)]) {
			best = e
		}
	}
	return best
}

// Load reads e's file whole, checks it and decodes its snapshot with codec. A file that fails is
// deleted.
func (d *Disk) Load(e *DiskEntry, codec backend.Persistent) (backend.Snapshot, []float32, error) {
	snap, logits, err := d.read(e, codec)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.bad.Add(1)
		d.removeLocked(e.name)
		return nil, nil, err
	}
	d.loads.Add(1)
	now := time.Now()
	if cur, ok := d.entries[e.name]; ok {
		cur.used = now
	}
	os.Chtimes(filepath.Join(d.dir, e.name), now, now) // the recency survives a restart
	return snap, logits, nil
}

func (d *Disk) read(e *DiskEntry, codec backend.Persistent) (backend.Snapshot, []float32, error) {
	raw, err := os.ReadFile(filepath.Join(d.dir, e.name))
	if err != nil {
		return nil, nil, err
	}
	if len(raw) < snapHeader+sha256.Size {
		return nil, nil, errors.New("truncated")
	}
	body, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, nil, errors.New("checksum mismatch")
	}
	nt, nl, _, err := d.checkHeader(body[:snapHeader], int64(len(raw)))
	if err != nil {
		return nil, nil, err
	}
	pos := int(binary.LittleEndian.Uint32(body[48:]))
	rest := body[snapHeader:]
	if !slices.Equal(u32s(rest[:4*nt]), e.Tokens) || pos != nt {
		return nil, nil, errors.New("tokens differ from the index")
	}
	rest = rest[4*nt:]
	logits := make([]float32, nl)
	for i := range logits {
		logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
	}
	snap, err := codec.DecodeSnapshot(rest[4*nl:], pos)
	return snap, logits, err
}

// Wants reports whether a write of tokens would be taken now: not on disk yet, and the writer
// not behind (encoding a snapshot costs a copy of it, wasted on a write that would be dropped).
func (d *Disk) Wants(tokens []int) bool {
	if len(d.jobs) >= maxQueued {
		d.dropped.Add(1)
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.entries[fileName(tokens)]
	return !ok
}

// Put queues a write of a snapshot's encoding; it never blocks. A file stores 32 bits a token,
// so tokens outside the int32 range (which would not read back) are not written.
func (d *Disk) Put(tokens []int, data []byte, logits []float32) {
	if slices.ContainsFunc(tokens, func(t int) bool { return t != int(int32(t)) }) {
		d.dropped.Add(1)
		return
	}
	d.pending.Add(1)
	select {
	case d.jobs <- diskJob{slices.Clone(tokens), data, slices.Clone(logits)}:
	default:
		d.pending.Done()
		d.dropped.Add(1)
	}
}

func (d *Disk) writer() {
	for {
		select {
		case j := <-d.jobs:
			if err := d.write(j); err != nil {
				d.writeErr.Store(&err)
			}
			d.pending.Done()
		case <-d.done:
			return
		}
	}
}

// write stores j atomically (temporary file, fsync, rename) and evicts for room.
func (d *Disk) write(j diskJob) error {
	h := sha256.New()
	f, err := os.CreateTemp(d.dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	w := io.MultiWriter(f, h)
	var hdr []byte
	hdr = append(hdr, snapMagic...)
	hdr = append(hdr, d.identity[:]...)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(j.tokens)))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(j.logits)))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(j.tokens)))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(j.data)))
	for _, t := range j.tokens {
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(t))
	}
	for _, l := range j.logits {
		hdr = binary.LittleEndian.AppendUint32(hdr, math.Float32bits(l))
	}
	_, err = w.Write(hdr)
	if err == nil {
		_, err = w.Write(j.data)
	}
	if err == nil {
		_, err = f.Write(h.Sum(nil))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	name := fileName(j.tokens)
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(d.dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	d.writes.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.entries[name]; ok {
		d.used -= old.size
	}
	size := int64(len(hdr)) + int64(len(j.data)) + sha256.Size
	d.entries[name] = &DiskEntry{Tokens: j.tokens, name: name, size: size, used: time.Now()}
	d.used += size
	d.evictLocked()
	return nil
}

// evictLocked deletes least recently used files until the rest fit the budget.
func (d *Disk) evictLocked() {
	for d.used > d.budget && len(d.entries) > 0 {
		var oldest *DiskEntry
		for _, e := range d.entries {
			if oldest == nil || e.used.Before(oldest.used) {
				oldest = e
			}
		}
		d.removeLocked(oldest.name)
	}
}

func (d *Disk) removeLocked(name string) {
	if e, ok := d.entries[name]; ok {
		d.used -= e.size
		delete(d.entries, name)
	}
	os.Remove(filepath.Join(d.dir, name))
}

// Flush waits for the queued writes.
func (d *Disk) Flush() { d.pending.Wait() }

// Close flushes and stops the writer.
func (d *Disk) Close() {
	d.closeOnce.Do(func() {
		d.Flush()
		close(d.done)
	})
}

// DiskStats are the disk tier's counters.
type DiskStats struct {
	Files                       int
	Bytes, Budget               int64
	Writes, Loads, Dropped, Bad int64
	LastWriteError              string
}

// Stats returns a snapshot of the counters.
func (d *Disk) Stats() DiskStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := DiskStats{Files: len(d.entries), Bytes: d.used, Budget: d.budget, Writes: d.writes.Load(), Loads: d.loads.Load(), Dropped: d.dropped.Load(), Bad: d.bad.Load()}
	if err := d.writeErr.Load(); err != nil {
		st.LastWriteError = (*err).Error()
	}
	return st
}

func fileName(tokens []int) string {
	h := sha256.New()
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16]) + snapSuffix
}

// u32s reads the tokens a file stores, 32 bits each, as signed values: token ids are far below
// 2³¹, and the engine loop keys an image's tokens by negative values (written as their two's
// complement), which must read back as they were written.
func u32s(raw []byte) []int {
	out := make([]int, len(raw)/4)
	for i := range out {
		out[i] = int(int32(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	return out
}
