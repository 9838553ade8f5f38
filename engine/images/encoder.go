package images

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"

	"github.com/lilyformac/lily/engine/backend"
	"github.com/lilyformac/lily/engine/vision"
)

// ErrVisionOff marks an image sent to a backend that cannot read images.
var ErrVisionOff = errors.New("images: the model cannot read images")

// Encoded is an image run through the tower. It is shared between requests and the cache:
// read it, never change it.
type Encoded struct {
	// ID is the first 8 bytes of the SHA-256 of the image's bytes, big-endian.
	ID uint64
	// H and W are the merged grid: the image's token rows and columns (len(Rows) = H·W).
	H, W int
	// Rows are the tower's embeddings, one per token, row-major over the grid.
	Rows [][]float32
	// Width and Height are the source image's pixels.
	Width, Height int
}

// bytes is what the cache charges for the image: its float32 values.
func (e *Encoded) bytes() int64 {
	if len(e.Rows) == 0 {
		return 0
	}
	return 4 * int64(len(e.Rows)) * int64(len(e.Rows[0]))
}

// Encoder turns image references into encoded images, each distinct image's bytes through the
// tower once while it stays in the cache (agents resend every screenshot on every turn). It is
// safe for concurrent use.
type Encoder struct {
	b      backend.Backend
	proc   vision.Processor
	opts   Options
	client *http.Client

	flights singleflight.Group
	// tower serialises tower runs: a backend is not promised to run two at once, and one run on
	// a large image already takes the machine's cores and much memory.
	tower sync.Mutex

	mu    sync.Mutex
	cache *lru

	encodes, hits atomic.Int64
}

// NewEncoder encodes with b's tower after proc's preprocessing, capped by opts.MaxPixels.
func NewEncoder(b backend.Backend, proc vision.Processor, opts Options) *Encoder {
	opts = opts.withDefaults()
	return &Encoder{
		b: b, proc: proc.WithMaxPixels(opts.MaxPixels), opts: opts,
		client: newClient(opts.Timeout), cache: newLRU(opts.CacheBytes),
	}
}

// Stats counts tower runs (encodes) and references answered from the cache (hits).
func (e *Encoder) Stats() (encodes, hits int64) { return e.encodes.Load(), e.hits.Load() }

// Encode reads ref and returns its image's embeddings, from the cache when the same bytes were
// encoded before. Concurrent calls for the same new image share one tower run.
func (e *Encoder) Encode(ctx context.Context, ref string) (*Encoded, error) {
	if err := e.visionOff(); err != nil {
		return nil, err
	}
	data, err := e.load(ctx, ref)
	if err != nil {
		return nil, err
	}
	return e.EncodeBytes(ctx, data)
}

// visionOff is ErrVisionOff with the backend's reason when it takes no images (checked before a
// remote image is fetched), else nil.
func (e *Encoder) visionOff() error {
	if d := e.b.Describe(); !d.Vision {
		return fmt.Errorf("%w: %s", ErrVisionOff, d.VisionWhy)
	}
	return nil
}

// EncodeBytes is Encode for an image file's bytes already in hand (lily run's --image).
func (e *Encoder) EncodeBytes(ctx context.Context, data []byte) (*Encoded, error) {
	if err := e.visionOff(); err != nil {
		return nil, err
	}
	id := imageID(data)
	if enc := e.lookup(id); enc != nil {
		e.hits.Add(1)
		return enc, nil
	}
	ch := e.flights.DoChan(strconv.FormatUint(id, 16), func() (any, error) {
		if enc := e.lookup(id); enc != nil { // a flight that ended since our lookup stored it
			e.hits.Add(1)
			return enc, nil
		}
		return e.encode(id, data)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*Encoded), nil
	case <-ctx.Done(): // the flight goes on for the others and the cache
		return nil, ctx.Err()
	}
}

// encode decodes, preprocesses and runs the tower, then keeps the result.
func (e *Encoder) encode(id uint64, data []byte) (*Encoded, error) {
	img, _, err := vision.DecodeLimit(data, e.proc.MaxDecodePixels)
	if err != nil {
		return nil, err
	}
	px, err := e.proc.Pixels(img)
	if err != nil {
		return nil, err
	}
	e.tower.Lock()
	rows, err := e.b.EncodeImage(px)
	e.tower.Unlock()
	if err != nil {
		return nil, err
	}
	e.encodes.Add(1)
	if len(rows) != px.Tokens() {
		return nil, fmt.Errorf("images: the tower gave %d rows for %d tokens", len(rows), px.Tokens())
	}
	b := img.Bounds()
	enc := &Encoded{ID: id, H: px.MergedH(), W: px.MergedW(), Rows: rows, Width: b.Dx(), Height: b.Dy()}
	e.mu.Lock()
	e.cache.add(enc)
	e.mu.Unlock()
	return enc, nil
}

// Tokens is the number of prompt tokens ref's image takes, from its header alone: no decode, no
// tower (token counting endpoints). A remote image is fetched, bounded by the options' timeout.
func (e *Encoder) Tokens(ref string) (int, error) {
	data, err := e.load(context.Background(), ref)
	if err != nil {
		return 0, err
	}
	cfg, _, err := vision.DecodeConfigLimit(data, e.proc.MaxDecodePixels)
	if err != nil {
		return 0, err
	}
	return e.proc.Tokens(cfg.Width, cfg.Height)
}

// load returns ref's bytes, fetching a remote URL only when the options allow it.
func (e *Encoder) load(ctx context.Context, ref string) ([]byte, error) {
	src, err := ParseSource(ref, e.opts.MaxBytes)
	if err != nil {
		return nil, err
	}
	if src.URL == "" {
		return src.Data, nil
	}
	if !e.opts.AllowURLs {
		return nil, fmt.Errorf("%w: %.80s", ErrURLsOff, src.URL)
	}
	return fetch(ctx, e.client, src.URL, e.opts.MaxBytes)
}

func (e *Encoder) lookup(id uint64) *Encoded {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cache.get(id)
}

func imageID(data []byte) uint64 {
	sum := sha256.Sum256(data)
	return binary.BigEndian.Uint64(sum[:8])
}

// lru keeps encoded images within a byte budget, dropping the least recently used first.
type lru struct {
	limit, size int64
	order       *list.List // front: most recently used; values *Encoded
	byID        map[uint64]*list.Element
}

func newLRU(limit int64) *lru {
	return &lru{limit: limit, order: list.New(), byID: map[uint64]*list.Element{}}
}

func (c *lru) get(id uint64) *Encoded {
	el, ok := c.byID[id]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*Encoded)
}

// add keeps enc unless it alone is over the budget, then drops the oldest until all fit.
func (c *lru) add(enc *Encoded) {
	if _, ok := c.byID[enc.ID]; ok || enc.bytes() > c.limit {
		return
	}
	c.byID[enc.ID] = c.order.PushFront(enc)
	c.size += enc.bytes()
	for c.size > c.limit {
		old := c.order.Remove(c.order.Back()).(*Encoded)
		delete(c.byID, old.ID)
		c.size -= old.bytes()
	}
}

// Len is how many images the cache holds (for tests and metrics).
func (e *Encoder) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.cache.byID)
}
