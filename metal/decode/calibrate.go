package decode

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/internal/fsutil"
)

// CalibrationVersion is the calibration file's format (2: with each point's verify step).
const CalibrationVersion = 2

// Calibration is a chip's decode step measured at several row counts and contexts (`lily bench
// --profile --rows`) beside a GroupModel's time for the same shapes: each point's rows are
// distinct sequences of one row each, which is what the multi-row plans run. The GroupModel
// prices every shape at the chip table's peaks; a real step is slower by a factor that depends
// on the shape (launches, the kernels' efficiency at each row count), and that factor is what
// the gate needs right, since it weighs a step of n rows against one of a single row.
type Calibration struct {
	Version int    `json:"version"`
	Chip    string `json:"chip"`   // the GroupModel's chip (plan.Chips)
	Device  string `json:"device"` // what ran the steps: the Mac's GPU, or the emulator
	Model   string `json:"model"`  // the checkpoint measured, for people
	// ModelID is the GroupModel's ID: a file measured against another model, or against another
	// release's plan of this one, prices a step that is not the one served.
	ModelID string             `json:"model_id"`
	KVBits  int                `json:"kv_bits"`
	Points  []CalibrationPoint `json:"points"`
}

// CalibrationPoint is one measured shape: Rows sequences, one row each, after Context cached
// positions; StepS the measured seconds per step as the generation loop runs it on the device,
// ModeledS the GroupModel's. VerifyS is a step that verifies drafts, as the engine loop runs it:
// one sequence's next token and Rows−1 drafts as one group of rows, the host reading every
// row's logits, then the commit of the kept rows (Rows 1: a host-driven plain step), and
// VerifyModeledS the GroupModel's time for that group. A step with drafts is host-driven where a
// plain one stays on the device, so its price carries what that costs (the lost overlap of two
// steps in flight, the logits read back, the commit).
type CalibrationPoint struct {
	Rows           int     `json:"rows"`
	Context        int     `json:"context"`
	StepS          float64 `json:"step_s"`
	ModeledS       float64 `json:"modeled_s"`
	VerifyS        float64 `json:"verify_s"`
	VerifyModeledS float64 `json:"verify_modeled_s"`
}

// NewCalibration records points measured on device (a checkpoint named model) against m.
func NewCalibration(m *GroupModel, device, model string, points []CalibrationPoint) *Calibration {
	return &Calibration{Version: CalibrationVersion, Chip: m.Chip.Name, Device: device, Model: model,
		ModelID: m.ID(), KVBits: m.KVBits, Points: slices.Clone(points)}
}

// ID names what the model prices: every part but Row, which holds buffers sized by the context
// the plan was built for (attention's split partials), so a model of the same checkpoint and KV
// format built for another context keeps its ID. The calibration's ratios are applied to that
// model's Row as measured against the bench's; Row is a few per cent of a step.
func (m *GroupModel) ID() string {
	h := sha256.Sum256(fmt.Appendf(nil, "shared %d routed %d seq %d kv %g+%g/pos flops %g+%g/key experts %d/%d",
		m.Shared, m.Routed, m.Seq, m.KVBase, m.KVPos, m.RowFLOPs, m.KeyFLOPs, m.experts, m.topK))
	return hex.EncodeToString(h[:8])
}

// CalibrationPath is where `lily bench --profile --rows` keeps chip's calibration: a file per
// chip in the user cache directory (~/Library/Caches/lily/calibration on macOS), beside the
// other files Lily derives from this machine. Measuring again rebuilds it.
func CalibrationPath(chip string) (string, error) {
	if chip == "" {
		return "", errors.New("decode: a calibration needs a chip")
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("decode: no user cache directory: %w", err)
	}
	name := strings.ToLower(strings.Join(strings.Fields(chip), "-"))
	return filepath.Join(dir, "lily", "calibration", name+".json"), nil
}

// Write checks c and replaces path with it atomically (a temporary file, synced, renamed), so
// a reader sees the old calibration or the new one, never a part.
func (c *Calibration) Write(path string) error {
	if _, err := c.grid(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, append(data, '\n'), 0o644)
}

// ReadCalibration reads and checks the calibration at path: its version, and a grid of points
// (every measured row count at every measured context) with positive times.
func ReadCalibration(path string) (*Calibration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Calibration
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("calibration %s: %w", path, err)
	}
	if _, err := c.grid(); err != nil {
		return nil, fmt.Errorf("calibration %s: %w", path, err)
	}
	return &c, nil
}

// Calibrated is m's cost scaled by the calibration at path (CalibratedCost), or m itself and
// why not. Without a file (a Mac not yet calibrated; the error wraps fs.ErrNotExist, which a
// caller need not report) or with one that does not parse or check, the plain model is all there
// is. A file of another chip, KV format or model is refused too: its ratios are another step's,
// and a ratio that flatters the multi-row step makes the gate draft where drafting loses, the
// failure the gate exists to prevent. The plain model is at least this step's own account,
// wrong only by how far this chip falls short of its peaks.
func Calibrated(m *GroupModel, path string) (draft.Cost, error) {
	c, err := ReadCalibration(path)
	if err != nil {
		return m, err
	}
	cost, err := c.Cost(m)
	if err != nil {
		return m, fmt.Errorf("calibration %s: %w", path, err)
	}
	return cost, nil
}

// Cost is m scaled by c's measured ratios, when c was measured against m's chip, KV format and
// model.
func (c *Calibration) Cost(m *GroupModel) (*CalibratedCost, error) {
	switch {
	case c.Chip != m.Chip.Name:
		return nil, fmt.Errorf("measured on %s (%s), not %s: another chip's times", c.Chip, c.Device, m.Chip.Name)
	case c.KVBits != m.KVBits:
		return nil, fmt.Errorf("measured with a %d-bit KV cache, not %d-bit: another format's attention", c.KVBits, m.KVBits)
	case c.ModelID != m.ID():
		return nil, fmt.Errorf("measured against model %s (%s), not %s: another checkpoint or another Lily's plan; measure again", c.ModelID, c.Model, m.ID())
	}
	g, err := c.grid()
	if err != nil {
		return nil, err
	}
	g.Model = m
	return g, nil
}

// grid checks the points and lays them out as a CalibratedCost without a model.
func (c *Calibration) grid() (*CalibratedCost, error) {
	if c.Version != CalibrationVersion {
		return nil, fmt.Errorf("version %d, want %d", c.Version, CalibrationVersion)
	}
	if c.Chip == "" || c.ModelID == "" || c.KVBits != 16 && c.KVBits != 8 {
		return nil, fmt.Errorf("chip %q, model %q, %d-bit KV: want a chip, a model and 16 or 8", c.Chip, c.ModelID, c.KVBits)
	}
	g := &CalibratedCost{}
	for _, p := range c.Points {
		if p.Rows < 1 || p.Rows > MaxRows || p.Context < 0 || !positive(p.StepS) || !positive(p.ModeledS) || !positive(p.VerifyS) || !positive(p.VerifyModeledS) {
			return nil, fmt.Errorf("point %+v: want 1 to %d rows, a context of 0 or more, positive times", p, MaxRows)
		}
		if !slices.Contains(g.rows, float64(p.Rows)) {
			g.rows = append(g.rows, float64(p.Rows))
		}
		if !slices.Contains(g.ctxs, float64(p.Context)) {
			g.ctxs = append(g.ctxs, float64(p.Context))
		}
	}
	slices.Sort(g.rows)
	slices.Sort(g.ctxs)
	if len(c.Points) == 0 || len(c.Points) != len(g.rows)*len(g.ctxs) {
		return nil, fmt.Errorf("%d points for %d row counts at %d contexts: want each row count at each context once", len(c.Points), len(g.rows), len(g.ctxs))
	}
	g.ratio, g.verify = make([]float64, len(c.Points)), make([]float64, len(c.Points))
	seen := make([]bool, len(c.Points))
	for _, p := range c.Points {
		i := slices.Index(g.rows, float64(p.Rows))*len(g.ctxs) + slices.Index(g.ctxs, float64(p.Context))
		if seen[i] {
			return nil, fmt.Errorf("%d rows at %d positions measured twice", p.Rows, p.Context)
		}
		seen[i], g.ratio[i], g.verify[i] = true, p.StepS/p.ModeledS, p.VerifyS/p.VerifyModeledS
	}
	return g, nil
}

func positive(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

// CalibratedCost is a GroupModel scaled by measured ratios (a draft.Cost, in seconds): a step
// of n rows whose rows have cached ctx positions on average (weighted by rows) costs the model's
// time times the ratio measured/modeled at n rows and ctx, interpolated linearly between the
// measured row counts and contexts and held at the nearest outside them. A plain step (every
// group one row) takes the ratio of steps as the generation loop runs them on the device; a
// step with a verify group, the ratio of the host-driven verify steps (CalibrationPoint.VerifyS),
// so drafting pays for leaving the device loop. At a measured shape it is the measured time.
type CalibratedCost struct {
	Model  *GroupModel
	rows   []float64 // the measured row counts, ascending
	ctxs   []float64 // the measured contexts, ascending
	ratio  []float64 // ratio[i*len(ctxs)+j]: measured over modeled at rows[i], ctxs[j]
	verify []float64 // the same for the verify steps
}

var _ draft.Cost = (*CalibratedCost)(nil)

// Step is the step's time in seconds.
func (c *CalibratedCost) Step(groups []draft.Group) float64 {
	n, keys, verify := 0, 0.0, false
	for _, g := range groups {
		n += g.Rows
		keys += float64(g.Rows) * float64(g.Ctx)
		verify = verify || g.Rows > 1
	}
	t := c.Model.Step(groups)
	switch {
	case n == 0:
		return t
	case verify:
		return t * c.interpolate(c.verify, n, keys/float64(n))
	}
	return t * c.Ratio(n, keys/float64(n))
}

// Ratio is the measured over modeled time of a plain step at rows rows and ctx cached positions,
// interpolated.
func (c *CalibratedCost) Ratio(rows int, ctx float64) float64 {
	return c.interpolate(c.ratio, rows, ctx)
}

// interpolate reads the ratio grid ratio at rows and ctx.
func (c *CalibratedCost) interpolate(ratio []float64, rows int, ctx float64) float64 {
	i, wi := bracket(c.rows, float64(rows))
	j, wj := bracket(c.ctxs, ctx)
	i1, j1 := min(i+1, len(c.rows)-1), min(j+1, len(c.ctxs)-1)
	at := func(i, j int) float64 { return ratio[i*len(c.ctxs)+j] }
	lo := at(i, j)*(1-wj) + at(i, j1)*wj
	hi := at(i1, j)*(1-wj) + at(i1, j1)*wj
	return lo*(1-wi) + hi*wi
}

// bracket finds x among the ascending xs: the index i before it and the weight w of xs[i+1],
// with w 0 at or outside the ends (held at the nearest).
func bracket(xs []float64, x float64) (i int, w float64) {
	if x <= xs[0] {
		return 0, 0
	}
	for i = 0; i+1 < len(xs); i++ {
		if x < xs[i+1] {
			return i, (x - xs[i]) / (xs[i+1] - xs[i])
		}
	}
	return len(xs) - 1, 0
}
