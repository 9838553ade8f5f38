package kernels

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/lilyformac/lily/metal/emu/gen"
)

var attnRowsShape = AttnShape{Heads: 4, KVHeads: 2, HeadDim: 64, RotaryDim: 16, MaxCtx: 40, PageSize: 16, Pages: 7}

// TestAttnRowsCalls: the one-row decode calls are the rows calls at one row; at R rows only the
// grid's row dimension changes. attn_qk_rope_kv's rows call differs from the one-row call only in
// ATTN_SEQ_ROWS (set, where the one-row call leaves it unset) and grid y; zero rows panic.
func TestAttnRowsCalls(t *testing.T) {
	s := attnRowsShape
	pb, cb := AttnDecodePartialBuffers[int]{1, 2, 3, 4, 5, 6, 7}, AttnDecodeCombineBuffers[int]{1, 2, 3, 4, 5}
	rb := AttnQKRopeKVBuffers[int]{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	if !reflect.DeepEqual(AttnDecodePartialCall(s, 3, pb), AttnDecodePartialRowsCall(s, 3, 1, pb)) ||
		!reflect.DeepEqual(AttnDecodeCombineCall(s, 3, cb), AttnDecodeCombineRowsCall(s, 3, 1, cb)) {
		t.Error("the one-row decode calls are not the rows calls at one row")
	}
	rope := AttnQKRopeKVCall(s, 1e-6, 64, rb)
	if _, ok := rope.Constants[AttnSeqRows]; ok {
		t.Errorf("the one-row attn_qk_rope_kv sets ATTN_SEQ_ROWS: %v", rope.Constants)
	}
	for r := 1; r <= 8; r++ {
		p, c, q := AttnDecodePartialRowsCall(s, 3, r, pb), AttnDecodeCombineRowsCall(s, 3, r, cb), AttnQKRopeKVRowsCall(s, 1e-6, 64, r, rb)
		want := AttnDecodePartialCall(s, 3, pb)
		want.Threadgroups[2] = r
		if !reflect.DeepEqual(p, want) {
			t.Errorf("partial at %d rows: %+v", r, p)
		}
		want = AttnDecodeCombineCall(s, 3, cb)
		want.Threadgroups[1] = r
		if !reflect.DeepEqual(c, want) {
			t.Errorf("combine at %d rows: %+v", r, c)
		}
		rest := maps.Clone(q.Constants)
		delete(rest, AttnSeqRows)
		if q.Constants[AttnSeqRows] != true || !maps.Equal(rest, rope.Constants) || q.Threadgroups != [3]int{s.Heads + s.KVHeads, r, 1} ||
			!maps.Equal(q.Buffers, rope.Buffers) || q.Group != rope.Group {
			t.Errorf("attn_qk_rope_kv at %d rows: %+v", r, q)
		}
	}
	for _, f := range []func(){
		func() { AttnDecodePartialRowsCall(s, 3, 0, pb) }, func() { AttnDecodeCombineRowsCall(s, 3, 0, cb) },
		func() { AttnQKRopeKVRowsCall(s, 1e-6, 64, 0, rb) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("zero rows: no panic")
				}
			}()
			f()
		}()
	}
}

// TestAttnSeqRowsConstant: attn_rope.metal declares ATTN_SEQ_ROWS at AttnSeqRows as an optional
// bool (unset: today's pipeline); attn_decode.metal has no row constant (its rows are the grid's).
func TestAttnSeqRowsConstant(t *testing.T) {
	for _, f := range []struct {
		file string
		want bool
	}{{"attn_rope.metal", true}, {"attn_decode.metal", false}} {
		u, err := gen.Translate(Path(f.file), Source(f.file))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(u.Constants, func(c gen.Constant) bool { return c.Index == AttnSeqRows })
		if got := i >= 0 && u.Constants[i].Type == "bool" && u.Constants[i].Optional; got != f.want || !f.want && i >= 0 {
			t.Errorf("%s's constant %d: %+v, want an optional bool: %v", f.file, AttnSeqRows, u.Constants, f.want)
		}
	}
}

// TestAttnRowsReferences: the rows references are the one-row references on each row's slice of
// the inputs, at its position, under its table, into the shared pool.
func TestAttnRowsReferences(t *testing.T) {
	s, r := attnRowsShape, rand.New(rand.NewPCG(1, 2))
	steps, tables := []uint32{33, 7, 5, 8}, []uint32{4, 1, 6, 0, 3, 2}
	qd, kd := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	p := AttnRopeParams{QNorm: RandFloats(r, s.HeadDim, 1), KNorm: RandFloats(r, s.HeadDim, 1), InvFreq: RopeInvFreq(s.RotaryDim, 1e7), Eps: 1e-6}
	qg, k, v := RandFloats(r, 2*2*qd, 1), RandFloats(r, 2*kd, 1), RandFloats(r, 2*kd, 1)
	kc, vc := make([]byte, s.CacheBytes()), make([]byte, s.CacheBytes())
	q := AttnQKRopeKVRows(s, p, steps, qg, k, v, kc, vc, tables)
	k1, v1 := make([]byte, s.CacheBytes()), make([]byte, s.CacheBytes())
	var q1 []float32
	for row := range 2 {
		q1 = append(q1, AttnQKRopeKV(s, p, int(steps[2*row]), qg[2*row*qd:2*(row+1)*qd], k[row*kd:(row+1)*kd], v[row*kd:(row+1)*kd], k1, v1, tables[3*row:3*row+3])...)
	}
	if !slices.Equal(q, q1) || !bytes.Equal(kc, k1) || !bytes.Equal(vc, v1) {
		t.Error("AttnQKRopeKVRows differs from AttnQKRopeKV row by row")
	}
	// fill both rows' positions so the attention reads written rows only
	x := RandFloats(r, s.HeadDim, 1)
	for row := range 2 {
		for j := range int(steps[2*row]) + 1 {
			for h := range s.KVHeads {
				s.StoreKV(kc, h, s.Row(tables[3*row:3*row+3], j), x)
				s.StoreKV(vc, h, s.Row(tables[3*row:3*row+3], j), RandFloats(r, s.HeadDim, 1))
			}
		}
	}
	out := AttnDecodeRows(s, steps, q, qg, kc, vc, tables)
	for row := range 2 {
		want := AttnDecode(s, int(steps[2*row]), q[row*qd:(row+1)*qd], qg[2*row*qd:2*(row+1)*qd], kc, vc, tables[3*row:3*row+3])
		if !slices.Equal(out[row*qd:(row+1)*qd], want) {
			t.Errorf("AttnDecodeRows row %d differs from AttnDecode", row)
		}
	}
}
