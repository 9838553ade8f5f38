package gpu

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/lilyformac/lily/engine/vision"
	"github.com/lilyformac/lily/metal/decode"
	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/plan"
	"github.com/lilyformac/lily/metal/vit"
)

// towerCacheSize is how many grids keep their tower plan and executor: each executor holds its
// grid's activations (about 170 MB at a 1024×768 image's 3,072 patches), so only the latest
// few are kept; a chat usually sends images of one size.
const towerCacheSize = 2

// towerRun is the vision tower's plan for one grid and the executor running it.
type towerRun struct {
	t *vit.Tower
	x *exec.Executor
}

// towers are the backend's vision tower executors, most recently used last, and whether the
// tower's weight buffers (shared by name among them) are filled.
type towers struct {
	runs     []*towerRun
	uploaded bool
}

// towerDevice allocates a tower executor's buffers: its weights shared by name with every
// other tower executor (served from the mapped checkpoint where the device wraps it), every
// other buffer its own, since grids differ in size and the decode plans' activations are
// shared by name at their own sizes.
type towerDevice struct{ *sharedDevice }

func (d towerDevice) Alloc(b plan.Buffer) (exec.Memory, error) {
	if b.Kind == plan.Weights {
		return d.sharedDevice.Alloc(b)
	}
	return d.own(b)
}

// EncodeImage runs the vision tower on px through the GPU plan for its grid (metal/vit) and
// returns px.Tokens() rows of the text model's width, as engine/vision's Tower.Encode does. It
// holds the backend's step lock, so it never runs beside a step.
func (e *GPU) EncodeImage(px *vision.Pixels) ([][]float32, error) {
	v := e.w.Config.Vision
	if v == nil || e.w.Vision == nil {
		return nil, errors.New("gpu: the checkpoint has no vision tower")
	}
	if len(px.Rows) != px.GridH*px.GridW || px.Merge != v.Merge {
		return nil, fmt.Errorf("gpu: %d pixel rows merged by %d for a %d×%d grid (the tower merges by %d)", len(px.Rows), px.Merge, px.GridH, px.GridW, v.Merge)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r, err := e.tower(px.GridH, px.GridW)
	if err != nil {
		return nil, err
	}
	in := floatsOf(r.x.Bytes(r.t.Pixels))
	k := v.PatchInputs()
	for i, row := range px.Rows {
		if len(row) != k {
			return nil, fmt.Errorf("gpu: pixel row %d has %d values, the tower takes %d", i, len(row), k)
		}
		copy(in[i*k:], row)
	}
	if err := r.x.Step(); err != nil {
		return nil, err
	}
	res := floatsOf(r.x.Bytes(r.t.Out))
	out := make([][]float32, px.Tokens())
	for i := range out {
		out[i] = append([]float32(nil), res[i*v.OutHidden:(i+1)*v.OutHidden]...)
	}
	return out, nil
}

// tower is the cached run for a gh×gw grid, made (and the least recently used dropped) when
// missing. The caller holds e.mu.
func (e *GPU) tower(gh, gw int) (*towerRun, error) {
	for i, r := range e.vit.runs {
		if r.t.GH == gh && r.t.GW == gw {
			e.vit.runs = append(append(e.vit.runs[:i:i], e.vit.runs[i+1:]...), r)
			return r, nil
		}
	}
	r, err := e.newTowerRun(gh, gw)
	if err != nil {
		return nil, err
	}
	if len(e.vit.runs) == towerCacheSize {
		e.vit.runs[0].x.Close()
		e.vit.runs = e.vit.runs[1:]
	}
	e.vit.runs = append(e.vit.runs, r)
	return r, nil
}

// newTowerRun builds the tower's plan for the grid on the backend's route (Sizing.Route: the
// tensor-op GEMMs where the prefill chunks take them, so the device that compiled those kernels
// runs the tower's too), its executor over the shared weight buffers (filling them the first
// time), and writes the grid's host tables.
func (e *GPU) newTowerRun(gh, gw int) (*towerRun, error) {
	t, err := vit.Build(e.w.Config.Vision, gh, gw, e.size.Route)
	if err != nil {
		return nil, err
	}
	data, err := t.WeightData(e.w.Vision)
	if err != nil {
		return nil, err
	}
	if _, ok := e.dev.Device.(exec.Wrapper); ok {
		e.dev.addViews(data)
	}
	x, err := exec.New(towerDevice{e.dev}, t.Plan)
	if err != nil {
		return nil, err
	}
	x.Budget = e.budget // the production tower's TFLOPs span several command buffers
	if !e.vit.uploaded {
		e.uploadTower(t, x, data)
	}
	inv, rows, cols := t.HostTables()
	copy(x.Bytes(t.InvFreq), decode.BytesOf(inv))
	copy(x.Bytes(t.PosRows), decode.BytesOf(rows))
	copy(x.Bytes(t.PosCols), decode.BytesOf(cols))
	return &towerRun{t: t, x: x}, nil
}

// uploadTower copies the tower's weights into the buffers the device did not wrap.
func (e *GPU) uploadTower(t *vit.Tower, x *exec.Executor, data map[string]vit.Weight) {
	e.dev.mu.Lock()
	wrapped := map[string]bool{}
	for name := range t.Weights {
		_, wrapped[name] = e.dev.shared[name].(exec.View)
	}
	e.dev.mu.Unlock()
	for name, i := range t.Weights {
		if !wrapped[name] {
			copy(x.Bytes(i), data[name].Data)
		}
	}
	e.vit.uploaded = true
}

// addViews lets the device wrap the tower's bfloat tensors in the mapped checkpoint (Mapped);
// the float32 patch weight is Go memory and is copied.
func (d *sharedDevice) addViews(data map[string]vit.Weight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.views == nil {
		d.views = map[string][]byte{}
	}
	for name, w := range data {
		if w.Mapped {
			d.views[name] = w.Data
		}
	}
}

// closeTowers frees the tower executors' own buffers (the weights go with the backend's).
func (e *GPU) closeTowers() {
	for _, r := range e.vit.runs {
		r.x.Close()
	}
	e.vit.runs = nil
}

// floatsOf is a float32 buffer's host view as values.
func floatsOf(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
