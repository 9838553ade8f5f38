package gpu

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lilyformac/lily/internal/hostmem"
)

// The KV cache is a pool of pages shared by every session and snapshot (decode.Step.Attn): a
// session's block table lists its pages in order, a snapshot holds the pages of the positions it
// saved, and a page's reference count says how many of them hold it. Saving a session copies its
// recurrent state only; the snapshot and the session then share every KV page. A page is written
// only by a session that holds it alone: the first write into a shared page (the last, partly
// filled page of a saved prefix) copies it to a fresh page first. When no page is free, snapshots
// give theirs up oldest first, their KV rows copied to host memory (spilled); restoring a spilled
// snapshot copies them back into fresh pages, which the snapshot then shares again.

// ErrPoolFull is returned when a session needs a KV page and none is free, even after every
// snapshot has given its pages up: the live sessions hold them all.
var ErrPoolFull = errors.New("gpu: every page of the KV pool is held by a live session")

// pagePool counts the references to each pool page; the caller holds GPU.pagesMu.
type pagePool struct {
	ref      []int32
	free     []int32     // pages with no reference, the next one to hand out last
	resident []*Snapshot // snapshots holding pages, oldest first
}

func newPagePool(n int) *pagePool {
	p := &pagePool{ref: make([]int32, n)}
	for i := n - 1; i >= 0; i-- {
		p.free = append(p.free, int32(i))
	}
	return p
}

func (p *pagePool) retain(pages []int32) {
	for _, pg := range pages {
		p.ref[pg]++
	}
}

func (p *pagePool) release(pages []int32) {
	for _, pg := range pages {
		if p.ref[pg]--; p.ref[pg] == 0 {
			p.free = append(p.free, pg)
		}
	}
}

// Fits reports whether sequences that reach the given positions can run at once
// (backend.Backend): their pages, each with a spare for a copy on write, within the pool. It
// counts every page a sequence may hold as its own (pages shared with a snapshot or another
// session only make it hold fewer), and snapshots give their pages up when a session needs one,
// so a set that fits never finds the pool full.
func (e *GPU) Fits(positions []int) bool {
	ps := e.step.Attn.Page()
	need := 0
	for _, n := range positions {
		need += (n+ps-1)/ps + 1
	}
	e.pagesMu.Lock()
	defer e.pagesMu.Unlock()
	return need <= len(e.pages.ref)
}

// inUse is the number of pages some session or snapshot holds.
func (p *pagePool) inUse() int { return len(p.ref) - len(p.free) }

// PagesInUse is the number of KV pool pages held by sessions and snapshots.
func (e *GPU) PagesInUse() int {
	e.pagesMu.Lock()
	defer e.pagesMu.Unlock()
	return e.pages.inUse()
}

// takePage hands out a free page (reference count 1), spilling snapshots until one is free; it gives
// up with ErrPoolFull. stillNeeded is asked after each spill: a spill can end the sharing that
// made the page necessary (a copy on write), and then no page is taken (-1, nil). The caller
// holds pagesMu.
func (e *GPU) takePage(stillNeeded func() bool) (int32, error) {
	p := e.pages
	for len(p.free) == 0 {
		if len(p.resident) == 0 {
			return 0, ErrPoolFull
		}
		if err := e.spill(p.resident[0]); err != nil {
			return 0, err
		}
		if !stillNeeded() {
			return -1, nil
		}
	}
	pg := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.ref[pg] = 1
	return pg, nil
}

// kvView is the host view of the K and V pools, buffer by buffer (shared by every executor).
func (e *GPU) kvView(buf int) []byte { return e.kv[buf] }

// copyPage copies pool page from to page to in every K and V pool.
func (e *GPU) copyPage(from, to int32) {
	a, ps := e.step.Attn, e.step.Attn.Page()
	for _, buf := range e.step.KV {
		mem := e.kvView(buf)
		var src [][2]int64
		a.CacheSpans(int(from)*ps, ps, func(off, n int64) { src = append(src, [2]int64{off, n}) })
		i := 0
		a.CacheSpans(int(to)*ps, ps, func(off, n int64) {
			copy(mem[off:off+n], mem[src[i][0]:src[i][0]+src[i][1]])
			i++
		})
	}
}

// ensure makes sure the session holds, alone, the page that position pos is written into: a new
// page at the end of its table, or a copy of a shared one. The caller holds the step lock.
func (s *Session) ensure(pos int) error {
	e := s.e
	lp := pos / e.step.Attn.Page()
	e.pagesMu.Lock()
	defer e.pagesMu.Unlock()
	switch {
	case lp < len(s.pages) && e.pages.ref[s.pages[lp]] == 1:
		return nil
	case lp < len(s.pages): // shared with a snapshot or another session: copy on write
		old := s.pages[lp]
		pg, err := e.takePage(func() bool { return e.pages.ref[old] > 1 })
		if err != nil || pg < 0 {
			return err
		}
		e.copyPage(old, pg)
		e.pages.release([]int32{old})
		s.pages[lp] = pg
	case lp == len(s.pages):
		pg, err := e.takePage(func() bool { return true })
		if err != nil {
			return err
		}
		s.pages = append(s.pages, pg)
	default:
		return fmt.Errorf("gpu: position %d skips pages (the session holds %d)", pos, len(s.pages))
	}
	s.writeTable()
	return nil
}

// writeTable writes the session's pages into its executor's block table.
func (s *Session) writeTable() {
	t := s.x.Bytes(s.e.step.Table)
	for i, pg := range s.pages {
		t[4*i], t[4*i+1], t[4*i+2], t[4*i+3] = byte(pg), byte(pg>>8), byte(pg>>16), byte(pg>>24)
	}
}

// tableOf is pages as a block table.
func tableOf(pages []int32) []uint32 {
	t := make([]uint32, len(pages))
	for i, pg := range pages {
		t[i] = uint32(pg)
	}
	return t
}

// kvBytes is the size of a sequence's KV rows for pos positions (their spilled or encoded form).
func (e *GPU) kvBytes(pos int) int64 {
	var n int64
	e.step.StateSpans(pos, make([]uint32, e.step.Attn.TableLen()), func(buf int, _, size int64) {
		if e.isKV(buf) {
			n += size
		}
	})
	return n
}

func (e *GPU) isKV(buf int) bool { return slices.Contains(e.step.KV, buf) }

// spill copies a resident snapshot's KV rows to host memory and gives its pages up. The caller
// holds pagesMu.
func (e *GPU) spill(sn *Snapshot) error {
	kv, err := hostmem.Alloc(e.kvBytes(sn.pos))
	if err != nil {
		return fmt.Errorf("gpu: spilling a snapshot's KV rows: %w", err)
	}
	rest := kv
	e.step.StateSpans(sn.pos, tableOf(sn.pages), func(buf int, off, n int64) {
		if e.isKV(buf) {
			copy(rest[:n], e.kvView(buf)[off:off+n])
			rest = rest[n:]
		}
	})
	e.pages.release(sn.pages)
	sn.pages, sn.kv = nil, kv
	e.pages.resident = slices.DeleteFunc(e.pages.resident, func(x *Snapshot) bool { return x == sn })
	return nil
}

// adopt gives a spilled snapshot pages again: fresh ones filled from its host copy, shared with
// the session s that restores it (whose table they become). The caller holds pagesMu.
func (e *GPU) adopt(sn *Snapshot, s *Session) error {
	n := (sn.pos + e.step.Attn.Page() - 1) / e.step.Attn.Page()
	var pages []int32
	for range n {
		pg, err := e.takePage(func() bool { return true })
		if err != nil {
			e.pages.release(pages)
			return err
		}
		pages = append(pages, pg)
	}
	rest := sn.kv
	e.step.StateSpans(sn.pos, tableOf(pages), func(buf int, off, n int64) {
		if e.isKV(buf) {
			copy(e.kvView(buf)[off:off+n], rest[:n])
			rest = rest[n:]
		}
	})
	hostmem.Free(sn.kv)
	sn.kv, sn.pages = nil, pages
	e.pages.retain(pages) // the snapshot's references; the session keeps take's
	e.pages.resident = append(e.pages.resident, sn)
	s.pages = slices.Clone(pages)
	return nil
}
