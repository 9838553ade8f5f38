package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/backend"
)

// EncodeSnapshot writes a snapshot's state as little-endian float32s: per layer its conv window
// and DeltaNet state (GDN layers) or its K and V rows (attention layers), in layer order.
func (m *Model) EncodeSnapshot(s backend.Snapshot) ([]byte, error) {
	sn, ok := s.(*snapshot)
	if !ok || sn.m != m {
		return nil, fmt.Errorf("cpu: not a snapshot of this model")
	}
	out := make([]byte, 0, sn.st.bytes())
	for _, v := range sn.st.parts() {
		for _, f := range *v {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
		}
	}
	return out, nil
}

// DecodeSnapshot reads what EncodeSnapshot wrote for pos positions.
func (m *Model) DecodeSnapshot(data []byte, pos int) (backend.Snapshot, error) {
	st := m.NewState()
	st.Pos = pos
	kv := m.cfg.NumKVHeads * m.cfg.HeadDim
	for i := range st.k {
		if st.conv[i] == nil { // an attention layer: pos rows of K and V
			st.k[i], st.v[i] = make([]float32, pos*kv), make([]float32, pos*kv)
		}
	}
	parts := st.parts()
	var n int
	for _, v := range parts {
		n += 4 * len(*v)
	}
	if n != len(data) {
		return nil, fmt.Errorf("cpu: a snapshot of %d positions is %d bytes, not %d", pos, n, len(data))
	}
	for _, v := range parts {
		for j := range *v {
			(*v)[j] = math.Float32frombits(binary.LittleEndian.Uint32(data))
			data = data[4:]
		}
	}
	return &snapshot{m: m, st: st}, nil
}

// parts lists the state's arrays in encoding order.
func (st *State) parts() []*[]float32 {
	var out []*[]float32
	for i := range st.conv {
		if st.conv[i] != nil {
			out = append(out, &st.conv[i], &st.ssm[i])
		} else {
			out = append(out, &st.k[i], &st.v[i])
		}
	}
	return out
}
