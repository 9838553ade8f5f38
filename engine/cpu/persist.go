package cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/lilyformac/lily/engine/backend"
)

// EncodeSnapshot writes a snapshot's state as little-endian float32s: per layer its conv window
// and DeltaNet state (GDN layers) or its K and V rows (attention layers), in layer order; then
// the state's rotary delta (State.Delta: nonzero after an image) as a little-endian int64.
func (m *Model) EncodeSnapshot(s backend.Snapshot) ([]byte, error) {
	sn, ok := s.(*snapshot)
	if !ok || sn.m != m {
		return nil, fmt.Errorf("cpu: not a snapshot of this model")
	}
	if sn.parts == nil {
		return nil, errors.New("cpu: encoding a closed snapshot")
	}
	out := make([]byte, 0, len(sn.mem)+8)
	for _, v := range sn.parts {
		for _, f := range v {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
		}
	}
	return binary.LittleEndian.AppendUint64(out, uint64(int64(sn.delta))), nil
}

// DecodeSnapshot reads what EncodeSnapshot wrote for pos positions.
func (m *Model) DecodeSnapshot(data []byte, pos int) (backend.Snapshot, error) {
	if pos < 0 || pos > maxSnapshotPositions {
		return nil, fmt.Errorf("cpu: a snapshot of %d positions", pos)
	}
	sn, err := m.newSnapshot(pos)
	if err != nil {
		return nil, err
	}
	if len(sn.mem)+8 != len(data) {
		sn.Close()
		return nil, fmt.Errorf("cpu: a snapshot of %d positions is %d bytes, not %d", pos, len(sn.mem)+8, len(data))
	}
	sn.delta = int(int64(binary.LittleEndian.Uint64(data[len(sn.mem):])))
	for _, v := range sn.parts {
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(data))
			data = data[4:]
		}
	}
	return sn, nil
}

// maxSnapshotPositions bounds what a snapshot file may claim before memory is set aside for it.
const maxSnapshotPositions = 1 << 20

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
