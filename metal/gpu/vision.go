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

// towerCacheSize is how many grids keep their tower plan and executor; a chat usually sends
// images of one size. The executors share one set of activations, sized for the largest grid
// the backend was sized for (Sizing.Vision: 0.56 GB at 10,240 patches), since the tower runs one
// image at a time under e.mu: kept apart, each would hold as much, which Size would have to set
// aside from the KV cache (27,000 positions each on a 32 GB Mac). Each keeps its own host tables.
const towerCacheSize = 2

// towerRun is the vision tower's plan for one grid and the executor running it.
type towerRun struct {
	t *vit.Tower
	x *exec.Executor
}

// towers are the backend's vision tower executors, most recently used last, whether the
// tower's weight buffers (shared by name among them) are filled, and whether the largest grid's
// activation sizes are registered with the device (shareActivations).
type towers struct {
	runs     []*towerRun
	uploaded bool
	sized    bool
}

// towerDevice allocates a tower executor's buffers: its weights shared by name with every
// other tower executor (served from the mapped checkpoint where the device wraps it), its
// activations shared by name at the largest grid's sizes (the "vit." names are the tower's own),
// its host tables its own. A grid beyond the sized one (an image over the pixel cap the backend
// was sized for) gets activations of its own, as memory Size did not count.
type towerDevice struct{ *sharedDevice }

func (d towerDevice) Alloc(b plan.Buffer) (exec.Memory, error) {
	if b.Kind == plan.Weights || b.Kind == plan.Activations && d.covers(b) {
		return d.sharedDevice.Alloc(b)
	}
	return d.own(b)
}

// covers reports whether activation buffer b fits the size registered for its name.
func (d *sharedDevice) covers(b plan.Buffer) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.largest[b.Name] >= b.Size
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
	if err := e.shareActivations(); err != nil {
		return nil, err
	}
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

// shareActivations registers, once, the activation sizes of the largest grid the backend was
// sized for (Sizing.Vision.Patches at vit.LargestGrid: those of any grid of as many patches) as
// the sizes the device allocates the tower's shared activations at.
func (e *GPU) shareActivations() error {
	n := e.size.Vision.Patches
	if e.vit.sized || n == 0 {
		return nil
	}
	v := e.w.Config.Vision
	gh, gw := vit.LargestGrid(v, n)
	t, err := vit.Build(v, gh, gw, e.size.Route)
	if err != nil {
		return err
	}
	e.dev.mu.Lock()
	for _, b := range t.Plan.Buffers {
		if b.Kind == plan.Activations {
			e.dev.largest[b.Name] = max(e.dev.largest[b.Name], b.Size)
		}
	}
	e.dev.mu.Unlock()
	e.vit.sized = true
	return nil
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
