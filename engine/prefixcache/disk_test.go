package prefixcache

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/lilyformac/lily/engine/backend"
)

// rawSnap is a snapshot that is just its encoding, for a codec that copies bytes.
type rawSnap struct {
	data []byte
	pos  int
}

func (s *rawSnap) Pos() int                          { return s.pos }
func (s *rawSnap) Bytes() int64                      { return int64(len(s.data)) }
func (s *rawSnap) Restore() (backend.Session, error) { return nil, errors.New("not a real state") }
func (s *rawSnap) Close()                            {}

type rawCodec struct{}

func (rawCodec) EncodeSnapshot(s backend.Snapshot) ([]byte, error) {
	return s.(*rawSnap).data, nil
}

func (rawCodec) DecodeSnapshot(data []byte, pos int) (backend.Snapshot, error) {
	return &rawSnap{slices.Clone(data), pos}, nil
}

// TestDiskNegativeTokens: the engine loop keys image tokens by negative values; a file of such a
// sequence reads back with the same values, in the same process and after a reopen (a restart),
// so Longest finds it for the same key and Load accepts it (its tokens agree with the index).
// A token that does not fit 32 bits is not written at all.
func TestDiskNegativeTokens(t *testing.T) {
	dir := t.TempDir()
	id := Identity{Model: "m", Config: "c", Backend: "b"}
	key := []int{5, 9, -1, -2147483648, -123456789, 1 << 30, 7}
	payload := []byte("state bytes")
	d, err := OpenDisk(dir, 1<<20, id)
	if err != nil {
		t.Fatal(err)
	}
	d.Put(key, payload, []float32{0.5, -1})
	d.Put([]int{1, 1 << 33}, payload, nil)
	d.Close()
	if st := d.Stats(); st.Writes != 1 || st.Dropped != 1 {
		t.Fatalf("stats %+v: want the negative key written and the 33-bit one dropped", st)
	}
	check := func(d *Disk, when string) {
		t.Helper()
		prompt := append(slices.Clone(key), 3, 4)
		e := d.Longest(prompt)
		if e == nil || !slices.Equal(e.Tokens, key) {
			t.Fatalf("%s: Longest found %v, want %v", when, e, key)
		}
		snap, logits, err := d.Load(e, rawCodec{})
		if err != nil || !bytes.Equal(snap.(*rawSnap).data, payload) || snap.Pos() != len(key) || !slices.Equal(logits, []float32{0.5, -1}) {
			t.Fatalf("%s: Load: %v, %v, %v", when, snap, logits, err)
		}
		other := slices.Clone(key)
		other[3] = 1<<32 - 2147483648 // the same 32 bits read unsigned: another key
		if e := d.Longest(other); e != nil {
			t.Fatalf("%s: the key read unsigned matched %v", when, e.Tokens)
		}
	}
	check(d, "same process")
	d2, err := OpenDisk(dir, 1<<20, id)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if st := d2.Stats(); st.Files != 1 || st.Bad != 0 {
		t.Fatalf("reopened: %+v", st)
	}
	check(d2, "reopened")
}
