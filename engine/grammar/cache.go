package grammar

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Cache keeps compiled grammars, failures included, keyed by a canonical form of their source:
// the least recently used go first. It is safe for concurrent use; two requests compiling the
// same schema at once both compile it and one result is kept.
type Cache struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recent
	items map[string]*list.Element
}

type cached struct {
	key string
	g   *Grammar
	err error
}

// NewCache returns a cache of at most size grammars.
func NewCache(size int) *Cache {
	return &Cache{size: max(1, size), order: list.New(), items: map[string]*list.Element{}}
}

// JSONSchema returns the grammar of schema, compiling it unless an equivalent one (the same
// JSON up to white space and the order of keys other than properties) is cached.
func (c *Cache) JSONSchema(schema json.RawMessage) (*Grammar, error) {
	key, err := canonicalSchema(schema)
	if err != nil {
		return nil, fmt.Errorf("schema is not valid JSON: %v", err)
	}
	return c.get("schema:"+key, func() (*Grammar, error) { return CompileJSONSchema(schema) })
}

// ToolCalls returns the grammar of ToolCalls(tools, mode, name), cached likewise.
func (c *Cache) ToolCalls(tools []Tool, mode ToolMode, name string) (*Grammar, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "tools:%d:%q", mode, name)
	for _, t := range tools {
		params := t.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = json.RawMessage("null")
		}
		key, err := canonicalSchema(params)
		if err != nil {
			return nil, fmt.Errorf("tool %s: parameters are not valid JSON: %v", t.Name, err)
		}
		fmt.Fprintf(&b, ":%q=%s", t.Name, key)
	}
	return c.get(b.String(), func() (*Grammar, error) { return ToolCalls(tools, mode, name) })
}

func (c *Cache) get(key string, compile func() (*Grammar, error)) (*Grammar, error) {
	c.mu.Lock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		it := e.Value.(*cached)
		c.mu.Unlock()
		return it.g, it.err
	}
	c.mu.Unlock()
	g, err := compile()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok { // compiled meanwhile: keep one
		it := e.Value.(*cached)
		return it.g, it.err
	}
	c.items[key] = c.order.PushFront(&cached{key, g, err})
	for c.order.Len() > c.size {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*cached).key)
	}
	return g, err
}

// Len is the number of grammars cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// canonicalSchema writes raw compactly with object keys sorted, except the keys of "properties"
// (their order is the order properties are generated in).
func canonicalSchema(raw json.RawMessage) (string, error) {
	var b strings.Builder
	err := canonicalValue(&b, bytes.TrimSpace(raw), false)
	return b.String(), err
}

func canonicalValue(b *strings.Builder, raw json.RawMessage, keepOrder bool) error {
	if len(raw) == 0 {
		return fmt.Errorf("empty value")
	}
	switch raw[0] {
	case '{':
		ms, err := members(raw)
		if err != nil {
			return err
		}
		if !keepOrder {
			sort.SliceStable(ms, func(i, j int) bool { return ms[i].key < ms[j].key })
		}
		b.WriteByte('{')
		for i, m := range ms {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(m.key)
			b.Write(k)
			b.WriteByte(':')
			if err := canonicalValue(b, m.val, m.key == "properties" && !keepOrder); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return err
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canonicalValue(b, it, false); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return err
		}
		b.Write(buf.Bytes())
	}
	return nil
}
