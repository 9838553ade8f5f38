package decode

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/draft"
	"github.com/lilyformac/lily/metal/plan"
)

// TestGroupModelID: a model of the same checkpoint and KV format built for another context keeps
// its ID (a calibration measured at the bench's context serves any); another KV format or
// another checkpoint changes it.
func TestGroupModelID(t *testing.T) {
	c, chip := config.Production(), m4Max(t)
	ids := map[string]string{}
	for _, kv := range []int{16, 8} {
		for _, maxCtx := range []int{64, 4096, 40000} {
			m, err := NewGroupModel(c, maxCtx, kv, chip)
			if err != nil {
				t.Fatal(err)
			}
			if m.KVBits != kv {
				t.Fatalf("kv%d: KVBits %d", kv, m.KVBits)
			}
			key := map[int]string{16: "kv16", 8: "kv8"}[kv]
			if id, ok := ids[key]; ok && id != m.ID() {
				t.Errorf("%s at %d positions: ID %s, at 64 %s", key, maxCtx, m.ID(), id)
			}
			ids[key] = m.ID()
		}
	}
	if ids["kv16"] == ids["kv8"] {
		t.Errorf("both KV formats have ID %s", ids["kv16"])
	}
	other := *c
	other.NumExperts = 128 // another checkpoint: half the experts
	m, err := NewGroupModel(&other, 64, 16, chip)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID() == ids["kv16"] {
		t.Errorf("another checkpoint has the production model's ID %s", m.ID())
	}
}

// measured makes a calibration of m whose measured time is the modeled one times ratio(rows,
// ctx), at rows 1, 2, 4, 8 and contexts 1, 4096, 32768, and whose verify steps (host-driven)
// take hostly(rows, ctx) times the model's.
func measured(m *GroupModel, ratio func(rows, ctx int) float64) *Calibration {
	var points []CalibrationPoint
	for _, ctx := range []int{1, 4096, 32768} {
		for _, n := range []int{1, 2, 4, 8} {
			t := m.Step(repeat(draft.Group{Rows: 1, Ctx: ctx}, n))
			v := m.Step([]draft.Group{{Rows: n, Ctx: ctx}})
			points = append(points, CalibrationPoint{Rows: n, Context: ctx, StepS: t * ratio(n, ctx), ModeledS: t, VerifyS: v * hostly(n, ctx), VerifyModeledS: v})
		}
	}
	return NewCalibration(m, "Apple M4 Max", "Qwen/Qwen3.6-35B-A3B", points)
}

// A made-up chip whose steps are slower than the model by more at more rows and at longer
// contexts, and whose host-driven verify steps are slower still.
func slower(rows, ctx int) float64 { return 1.3 + 0.05*float64(rows) + float64(ctx)/1e5 }

func hostly(rows, ctx int) float64 { return slower(rows, ctx) + 0.2 }

// TestCalibratedCost: the calibration file round-trips; the calibrated cost is the measured time
// at every measured shape (so c(n)/c(1) is the measured one), interpolates the ratio linearly
// between measured row counts and contexts, holds it outside them, and scales a sequence's verify
// rows by the ratio of their number on the model's time for them.
func TestCalibratedCost(t *testing.T) {
	m, err := NewGroupModel(config.Production(), 32768+MaxRows, 16, m4Max(t))
	if err != nil {
		t.Fatal(err)
	}
	cal := measured(m, slower)
	path := filepath.Join(t.TempDir(), "new", "m4-max.json")
	if err := cal.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCalibration(path)
	if err != nil || !reflect.DeepEqual(back, cal) {
		t.Fatalf("read back %+v (%v), wrote %+v", back, err, cal)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	cost, err := Calibrated(m, path)
	if err != nil {
		t.Fatal(err)
	}
	cc := cost.(*CalibratedCost)
	at := func(n, ctx int) float64 { return cc.Step(repeat(draft.Group{Rows: 1, Ctx: ctx}, n)) }
	for _, p := range cal.Points {
		if got := at(p.Rows, p.Context); !near(got, p.StepS, 1e-12) {
			t.Errorf("%d rows at %d: %g s, measured %g", p.Rows, p.Context, got, p.StepS)
		}
		one := cal.Points[0] // 1 row at 1 position: measured c(n)/c(1) at that context
		if p.Context == one.Context && !near(at(p.Rows, 1)/at(1, 1), p.StepS/one.StepS, 1e-12) {
			t.Errorf("%d rows: c(n)/c(1) %g, measured %g", p.Rows, at(p.Rows, 1)/at(1, 1), p.StepS/one.StepS)
		}
	}
	for _, c := range []struct {
		rows int
		ctx  float64
		want float64
	}{
		{3, 4096, (slower(2, 4096) + slower(4, 4096)) / 2},                // between row counts
		{8, (4096 + 32768) / 2, (slower(8, 4096) + slower(8, 32768)) / 2}, // between contexts
		{6, 1000, ((slower(4, 1)+slower(8, 1))*(1-999.0/4095) + (slower(4, 4096)+slower(8, 4096))*999.0/4095) / 2},
		{8, 100000, slower(8, 32768)}, // beyond the longest context: held
		{1, 0, slower(1, 1)},          // before the shortest
	} {
		if got := cc.Ratio(c.rows, c.ctx); !near(got, c.want, 1e-12) {
			t.Errorf("%d rows at %g: ratio %g, want %g", c.rows, c.ctx, got, c.want)
		}
	}
	verify := []draft.Group{{Rows: 4, Ctx: 4096}, {Rows: 1, Ctx: 4096}} // 4 verify rows beside a plain sequence
	if got, want := cc.Step(verify), m.Step(verify)*hostly(5, 4096); !near(got, want, 1e-12) {
		t.Errorf("a verify step: %g s, want the model's %g s times the 5-row verify ratio", got, want)
	}
	for _, p := range cal.Points { // a sequence's verify group: the measured verify time
		if got := cc.Step([]draft.Group{{Rows: p.Rows, Ctx: p.Context}}); p.Rows > 1 && !near(got, p.VerifyS, 1e-12) {
			t.Errorf("a group of %d rows at %d: %g s, measured %g", p.Rows, p.Context, got, p.VerifyS)
		}
	}
	if got := cc.Step(nil); got != m.Step(nil) {
		t.Errorf("no rows: %g s, the model %g", got, m.Step(nil))
	}
}

// TestCalibratedRefuses: without a file, with a corrupt one, or with one of another chip, KV
// format or checkpoint, Calibrated gives the plain model and says why.
func TestCalibratedRefuses(t *testing.T) {
	c, chip := config.Production(), m4Max(t)
	m, err := NewGroupModel(c, 4096, 16, chip)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if cost, err := Calibrated(m, filepath.Join(dir, "none.json")); cost != draft.Cost(m) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no file: %v, %v", cost, err)
	}
	good := measured(m, slower)
	m3, _ := plan.ChipNamed("M3 Max")
	other := *c
	other.NumExperts = 128
	for _, tc := range []struct {
		name, want string
		file       func() []byte
		model      func() *GroupModel
	}{
		{"corrupt", "unexpected end of JSON", func() []byte { return []byte(`{"version": 2, "chip": "M4`) }, nil},
		{"version", "version 1, want 2", edit(good, func(c *Calibration) { c.Version = 1 }), nil},
		{"a hole", "10 points for 4 row counts at 3 contexts", edit(good, func(c *Calibration) { c.Points = c.Points[:10] }), nil},
		{"twice", "4 rows at 32768 positions measured twice", edit(good, func(c *Calibration) { c.Points[9].Rows = 4 }), nil},
		{"no time", "positive times", edit(good, func(c *Calibration) { c.Points[3].StepS = 0 }), nil},
		{"no verify time", "positive times", edit(good, func(c *Calibration) { c.Points[5].VerifyS = 0 }), nil},
		{"9 rows", "want 1 to 8 rows", edit(good, func(c *Calibration) { c.Points[3].Rows = 9 }), nil},
		{"KV format", "chip \"M4 Max\", model", edit(good, func(c *Calibration) { c.KVBits = 4 }), nil},
		{"another chip", "measured on M4 Max (Apple M4 Max), not M3 Max", nil, func() *GroupModel { o := *m; o.Chip = m3; return &o }},
		{"8-bit KV", "measured with a 16-bit KV cache, not 8-bit", nil, func() *GroupModel { return must(NewGroupModel(c, 4096, 8, chip)) }},
		{"another checkpoint", "another checkpoint or another Lily's plan", nil, func() *GroupModel { return must(NewGroupModel(&other, 4096, 16, chip)) }},
	} {
		path := filepath.Join(dir, tc.name+".json")
		data := edit(good, func(*Calibration) {})()
		if tc.file != nil {
			data = tc.file()
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		model := m
		if tc.model != nil {
			model = tc.model()
		}
		cost, err := Calibrated(model, path)
		if cost != draft.Cost(model) || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, %v; want the plain model and %q", tc.name, cost, err, tc.want)
		}
	}
	if err := (&Calibration{Version: CalibrationVersion, Chip: "M4 Max", ModelID: m.ID(), KVBits: 16}).Write(filepath.Join(dir, "empty.json")); err == nil {
		t.Error("a calibration without points written")
	}
}

// edit is good's file with change applied to a copy of it.
func edit(good *Calibration, change func(*Calibration)) func() []byte {
	return func() []byte {
		c := *good
		c.Points = append([]CalibrationPoint(nil), good.Points...)
		change(&c)
		data, err := json.Marshal(&c)
		if err != nil {
			panic(err)
		}
		return data
	}
}

func must(m *GroupModel, err error) *GroupModel {
	if err != nil {
		panic(err)
	}
	return m
}

// TestCalibrationPath: a chip's file is in the user cache directory, named after the chip.
func TestCalibrationPath(t *testing.T) {
	if _, err := os.UserCacheDir(); err != nil {
		t.Skip(err)
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache) // Linux; macOS ignores it
	p, err := CalibrationPath("M4 Max")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join("lily", "calibration", "m4-max.json")
	if !strings.HasSuffix(p, string(filepath.Separator)+want) || runtime.GOOS == "linux" && p != filepath.Join(cache, want) {
		t.Errorf("%s: want %s", p, filepath.Join(cache, want))
	}
	if _, err := CalibrationPath(""); err == nil {
		t.Error("a path for no chip")
	}
}
