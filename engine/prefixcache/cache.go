// Package prefixcache keeps sequence states for reuse by later prompts that start the same way:
// snapshots in memory under a budget, keyed by the tokens they consumed in a radix tree, and a
// tier of snapshot files on disk that survives a restart.
package prefixcache

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/lilyformac/lily/engine/backend"
)

// Cache keeps session snapshots keyed by the exact token sequence they consumed, under a memory
// budget with least-recently-used eviction. A snapshot is reusable for any prompt it prefixes:
// the KV cache could be cut anywhere, but DeltaNet's recurrent state only exists at the snapshot's
// own boundary, so reuse happens at entry boundaries: the checkpoints a prefill saves (see
// the engine loop's checkpoints), ends of prompts and ends of generations. The entries hang off a radix
// tree of their token sequences (radix.go), so a lookup walks the prompt once.
type Cache struct {
	mu      sync.Mutex
	budget  int64
	used    int64
	clock   uint64
	entries []*Entry // for least-recently-used eviction
	tree    radix

	hits, misses, hitTokens, evictions atomic.Int64
}

// Entry is a cached state: the snapshot after Tokens and the logits row predicting the next token.
type Entry struct {
	Tokens  []int
	Snap    backend.Snapshot
	Logits  []float32
	bytes   int64
	lastUse uint64
}

// NewCache returns a cache holding at most budget bytes (0 disables it).
func NewCache(budget int64) *Cache { return &Cache{budget: budget} }

// Lookup returns the entry with the longest token sequence that prefixes prompt, or nil.
func (c *Cache) Lookup(prompt []int) *Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	best := c.tree.longest(prompt)
	if best == nil {
		c.misses.Add(1)
		return nil
	}
	c.clock++
	best.lastUse = c.clock
	c.hits.Add(1)
	c.hitTokens.Add(int64(len(best.Tokens)))
	return best
}

// Wants reports whether a snapshot of tokens would be kept: the cache is on and holds no entry
// for exactly these tokens (saving one costs a copy of the state).
func (c *Cache) Wants(tokens []int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.budget > 0 && c.tree.get(tokens) == nil
}

// Store records snap (which the cache then owns, and closes when it lets it go) as the state
// after tokens.
func (c *Cache) Store(tokens []int, snap backend.Snapshot, logits []float32) {
	size := snap.Bytes() + int64(len(logits)*4+len(tokens)*8)
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.budget {
		snap.Close()
		return
	}
	c.clock++
	if old := c.tree.get(tokens); old != nil { // same state: keep one copy
		c.drop(slices.Index(c.entries, old))
	}
	e := &Entry{Tokens: slices.Clone(tokens), Snap: snap, Logits: slices.Clone(logits), bytes: size, lastUse: c.clock}
	c.entries = append(c.entries, e)
	c.tree.put(e.Tokens, e)
	c.used += size
	for c.used > c.budget {
		oldest := 0
		for i, e := range c.entries {
			if e.lastUse < c.entries[oldest].lastUse {
				oldest = i
			}
		}
		c.drop(oldest)
		c.evictions.Add(1)
	}
}

// drop removes entry i and frees its snapshot.
func (c *Cache) drop(i int) {
	c.used -= c.entries[i].bytes
	c.entries[i].Snap.Close()
	c.tree.remove(c.entries[i].Tokens)
	c.entries = slices.Delete(c.entries, i, i+1)
}

// Clear drops every entry (freeing their snapshots).
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.entries) > 0 {
		c.drop(len(c.entries) - 1)
	}
}

// Stats reports entries, bytes used, hits, misses, prompt tokens served from the cache and
// entries evicted for room.
type Stats struct {
	Entries                            int
	Bytes, Budget                      int64
	Hits, Misses, HitTokens, Evictions int64
}

// Stats returns a snapshot of the cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Entries: len(c.entries), Bytes: c.used, Budget: c.budget, Hits: c.hits.Load(), Misses: c.misses.Load(), HitTokens: c.hitTokens.Load(), Evictions: c.evictions.Load()}
}
