package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

const (
	indexName  = "model.safetensors.index.json"
	singleName = "model.safetensors"
)

// OpenDir opens a checkpoint directory: the shards listed by
// model.safetensors.index.json if present, else model.safetensors.
func OpenDir(dir string) (*Checkpoint, error) {
	index := filepath.Join(dir, indexName)
	if _, err := os.Stat(index); err == nil {
		return openIndex(dir, index)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(dir, singleName)
	if _, err := os.Stat(single); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %s: neither %s nor %s exists", dir, indexName, singleName)
	}
	return OpenFile(single)
}

// openIndex maps every shard named by the index and checks that the index
// and the shards agree exactly, so a stale or hand-edited index cannot
// silently hide or duplicate weights.
func openIndex(dir, index string) (*Checkpoint, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: index %s: "+format, append([]any{index}, args...)...)
	}
	js, err := os.ReadFile(index)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(js, &idx); err != nil {
		return nil, fail("not valid JSON: %v", err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fail("missing or empty weight_map")
	}

	// Group tensor names by cleaned shard path; names come out sorted so the
	// tensor quoted in an error is deterministic.
	want := map[string]string{} // tensor -> shard path
	byShard := map[string][]string{}
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		rel := filepath.FromSlash(idx.WeightMap[name])
		if !filepath.IsLocal(rel) {
			return nil, fail("tensor %q: shard path %q escapes the directory", name, idx.WeightMap[name])
		}
		p := filepath.Join(dir, rel)
		want[name] = p
		byShard[p] = append(byShard[p], name)
	}

	c := &Checkpoint{tensors: map[string]*Tensor{}, meta: map[string]string{}}
	if err := c.addShards(byShard, want, fail); err != nil {
		c.Close()
		return nil, err
	}
	c.finish()
	return c, nil
}

// addShards maps every shard, then checks both directions: each tensor found
// sits where the index says, and each tensor indexed was found.
func (c *Checkpoint) addShards(byShard map[string][]string, want map[string]string, fail func(string, ...any) error) error {
	for _, shard := range slices.Sorted(maps.Keys(byShard)) {
		ts, err := c.add(shard)
		if errors.Is(err, fs.ErrNotExist) {
			return fail("shard %s (holding %q) does not exist", shard, byShard[shard][0])
		}
		if err != nil {
			return err
		}
		for _, name := range slices.Sorted(maps.Keys(ts)) {
			if prev, ok := c.tensors[name]; ok {
				return fail("tensor %q is in both %s and %s", name, prev.File, shard)
			}
			c.tensors[name] = ts[name]
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.tensors)) {
		switch w, ok := want[name]; {
		case !ok:
			return fail("tensor %q in shard %s is not listed", name, c.tensors[name].File)
		case w != c.tensors[name].File:
			return fail("lists tensor %q in shard %s, but it is in %s", name, w, c.tensors[name].File)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := c.tensors[name]; !ok {
			return fail("lists tensor %q in shard %s, which does not contain it", name, want[name])
		}
	}
	return nil
}
