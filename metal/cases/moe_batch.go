package cases

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/lilyformac/lily/engine/model"
	"github.com/lilyformac/lily/engine/quant"
	"github.com/lilyformac/lily/metal/kernels"
)

// The multi-row decode MoE cases: R rows, each a different sequence's token, through one dispatch
// (MOE_BATCH = R) and, on the same weights, through R one-row dispatches (MOE_BATCH unset: the
// kernel every decode step runs today), each on its row alone. Every row is checked (a) against
// the Go reference on that row within the one-row cases' tolerance and (b) bit for bit against
// its one-row dispatch (ids, weights, act, res): the bits are the case's error on every device,
// so the selftest checks batch invariance on the Mac too. At R = 1, (b) is the constant set
// against unset.

// moeBatchInvariant wraps a batch-invariance failure as the qmv cases do.
func moeBatchInvariant(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("not batch-invariant (want the one-row dispatch on the row alone): %w", err)
}

// moeBatchTag names a row-count variant: "moe_router+rows3".
func moeBatchTag(kernel string, rows int) string { return fmt.Sprintf("%s+rows%d", kernel, rows) }

// moeBatchX is rows rows of x ([rows][H]; of scale 3 for the norm kernels, which see it normed,
// else 1 as the one-row cases): row 1 is row 0 plus a little noise (it routes to much the same
// experts), the others independent.
func moeBatchX(r *rand.Rand, h, rows int, norm bool) []float32 {
	xs := float32(1)
	if norm {
		xs = 3
	}
	x := RandFloats(r, rows*h, xs)
	if rows > 1 {
		for i, v := range RandFloats(r, h, xs/20) {
			x[h+i] = x[i] + v
		}
	}
	return x
}

// moeBatchIDs is [rows][K] expert choices for the gate/up and down cases: row 0 distinctIDs (the
// last expert among them), row 1 half of row 0's experts in other slots and half others, row 2
// disjoint from row 0 where E allows, row 3 row 0's experts in rotated slot order, row 5 row 0's
// first expert twice (a repeat moe_router never makes, which moe_gate_up runs apart from the
// rows sharing the expert), the rest independent.
func moeBatchIDs(r *rand.Rand, s kernels.MoEShape, rows int) []uint32 {
	first := distinctIDs(r, s.E, s.K)
	ids := slices.Clone(first)
	for row := 1; row < rows; row++ {
		var next []uint32
		switch row {
		case 1:
			next = slices.Clone(first[:(s.K+1)/2])
			slices.Reverse(next)
			next = moeFillIDs(r, s, next)
		case 2:
			next = moeFillIDs(r, s, nil, first...)
		case 3:
			next = append(slices.Clone(first[1:]), first[0])
		case 5:
			next = moeFillIDs(r, s, []uint32{first[0], first[0]})
		default:
			next = distinctIDs(r, s.E, s.K)
		}
		ids = append(ids, next...)
	}
	return ids
}

// moeFillIDs adds random experts to ids, none of avoid where E leaves enough others, until it holds K
// distinct ones.
func moeFillIDs(r *rand.Rand, s kernels.MoEShape, ids []uint32, avoid ...uint32) []uint32 {
	avoidOK := s.E-len(avoid) >= s.K
	for _, e := range r.Perm(s.E) {
		if len(ids) == s.K {
			break
		}
		id := uint32(e)
		if !slices.Contains(ids, id) && !(avoidOK && slices.Contains(avoid, id)) {
			ids = append(ids, id)
		}
	}
	return ids
}

// moeBatchWeights is [rows][K+1] routing weights: each row's K normalised, then a shared gate.
func moeBatchWeights(r *rand.Rand, k, rows int) []float32 {
	var out []float32
	for range rows {
		w := make([]float32, k+1)
		var sum float32
		for i := range k {
			w[i] = 0.05 + r.Float32()
			sum += w[i]
		}
		for i := range k {
			w[i] /= sum
		}
		w[k] = r.Float32()
		out = append(out, w...)
	}
	return out
}

// moeRow is row r of a [rows][n] vector.
func moeRow[T any](v []T, r, n int) []T { return v[r*n : (r+1)*n] }

// moeNormedRow is row r of x ([rows][h]) as the kernel multiplies it: add_rmsnorm's output for the
// norm kernels (gain non-nil).
func moeNormedRow(x []float32, r, h int, gain []uint16) []float32 {
	if gain == nil {
		return moeRow(x, r, h)
	}
	return normed(moeRow(x, r, h), gain)
}

// moeKernel is the instance base, or its _norm instance (the post-attention norm folded in).
func moeKernel(base string, norm bool) string {
	if norm {
		return base + "_norm"
	}
	return base
}

// moeRouterBatchCase: moe_router (or _norm) over rows rows of x in threadgroups of threads.
func moeRouterBatchCase(s kernels.MoEShape, threads, rows int, norm bool) Case {
	k := moeKernel("moe_router", norm)
	kernel := moeBatchTag(k, rows)
	return Case{
		Name: fmt.Sprintf("%s/%s_tg%d", kernel, moeTag(s), threads), Kernels: []string{kernel}, Tol: moeRouterTol,
		Shape: fmt.Sprintf("%d rows of x, H %d, E %d, top-%d, threadgroup of %d, %d rows a pass; and one row at a time",
			rows, s.H, s.E, s.K, threads, s.RouterPassRows(rows)),
		Run: func(c *Ctx) error {
			mo := &model.MoE{Router: RandQ(c.R, s.E, s.H, 8), SharedExpertGate: RandQ(c.R, 1, s.H, 8)}
			x := moeBatchX(c.R, s.H, rows, norm)
			var gain []uint16
			if norm {
				gain = RandGain(c.R, s.H, 0.5)
			}
			d := newMoEBatchRouter(c, s, mo, gain, threads)
			all := d.add(c, "", x, rows)
			one := make([]kernels.MoERouterBuffers[int], rows)
			for r := range rows {
				one[r] = d.add(c, fmt.Sprintf("row%d.", r), moeRow(x, r, s.H), 0)
			}
			if err := c.Step(); err != nil {
				return err
			}
			for r := range rows {
				if err := d.check(c, all, one[r], r, rows, moeNormedRow(x, r, s.H, gain)); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// moeBatchRouter declares a router's weights once and adds its dispatches on them.
type moeBatchRouter struct {
	s       kernels.MoEShape
	mo      *model.MoE
	bs      kernels.MoERouterBuffers[int] // the weights and the gain
	norm    bool
	threads int
	name    string
}

func newMoEBatchRouter(c *Ctx, s kernels.MoEShape, mo *model.MoE, gain []uint16, threads int) *moeBatchRouter {
	d := &moeBatchRouter{s: s, mo: mo, norm: gain != nil, threads: threads, name: moeKernel("moe_router", gain != nil)}
	d.bs = kernels.MoERouterBuffers[int]{Router: c.QM("router", mo.Router), SharedGate: c.QM("shared_gate_logit", mo.SharedExpertGate)}
	if d.norm {
		d.bs.Gain = c.In("gain", gain)
	}
	return d
}

// add dispatches the router on x: for rows rows (MOE_BATCH set), or with rows 0 on one row with
// the constant unset; it returns the buffers (IDs and Weights its outputs).
func (d *moeBatchRouter) add(c *Ctx, prefix string, x []float32, rows int) kernels.MoERouterBuffers[int] {
	return d.addOn(c, prefix, c.In(prefix+"x", x), rows)
}

// addOn is add on a declared x.
func (d *moeBatchRouter) addOn(c *Ctx, prefix string, x, rows int) kernels.MoERouterBuffers[int] {
	s, b := d.s, d.bs
	n := max(rows, 1)
	b.X, b.IDs, b.Weights = x, c.Out(prefix+"ids", 4*n*s.K), c.Out(prefix+"weights", 4*n*(s.K+1))
	switch {
	case rows == 0 && d.norm:
		c.Add(kernels.MoERouterNormCall(s, eps, d.threads, b), false)
	case rows == 0:
		c.Add(kernels.MoERouterCall(s, d.threads, b), false)
	case d.norm:
		c.Add(kernels.MoERouterNormRowsCall(s, rows, eps, d.threads, b), false)
	default:
		c.Add(kernels.MoERouterRowsCall(s, rows, d.threads, b), false)
	}
	return b
}

// check compares row r of the batched dispatch all with the reference on xn (the row as the
// kernel multiplies it) and, bit for bit, with the one-row dispatch one.
func (d *moeBatchRouter) check(c *Ctx, all, one kernels.MoERouterBuffers[int], r, rows int, xn []float32) error {
	k := d.s.K
	ids, w := moeRow(c.U32(all.IDs), r, k), moeRow(c.F32(all.Weights), r, k+1)
	what := fmt.Sprintf("row %d of %d: %s", r, rows, d.name)
	logits, shared := kernels.MoERouterLogits(d.mo, xn)
	if err := c.route(what, ids, w, logits, shared, k, true, moeRouterTol.For(c.Kind)); err != nil {
		return err
	}
	var idErr error
	if oneIDs := c.U32(one.IDs); !slices.Equal(ids, oneIDs) {
		idErr = fmt.Errorf("%s ids = %v, want %v", what, ids, oneIDs)
	}
	return moeBatchInvariant(errors.Join(idErr, Bits(what+" weights", w, c.F32(one.Weights))))
}

// moeBatchExperts are the routed and shared expert weights, declared once for every dispatch.
type moeBatchExperts struct {
	gu kernels.MoEGateUpBuffers[int]
	dc kernels.MoEDownCombineBuffers[int]
}

// moeDeclareExperts declares mo's gate/up and down weights (those asked for).
func moeDeclareExperts(c *Ctx, mo *model.MoE, gateUp, down bool) moeBatchExperts {
	var e moeBatchExperts
	if gateUp {
		e.gu = kernels.MoEGateUpBuffers[int]{Gate: c.QM("gate", mo.Gate), Up: c.QM("up", mo.Up),
			SharedGate: c.QM("shared_gate", mo.SharedGate), SharedUp: c.QM("shared_up", mo.SharedUp)}
	}
	if down {
		e.dc = kernels.MoEDownCombineBuffers[int]{Down: c.QM("down", mo.Down), SharedDown: c.QM("shared_down", mo.SharedDown)}
	}
	return e
}

// addGateUp dispatches moe_gate_up (moe_gate_up_norm with norm, gain its gain buffer) on ids and x
// for rows rows, or with rows 0 one row with MOE_BATCH unset; it returns the buffers (Act the
// output).
func (e moeBatchExperts) addGateUp(c *Ctx, s kernels.MoEShape, prefix string, ids, x, gain, rows int, norm, barrier bool) kernels.MoEGateUpBuffers[int] {
	b := e.gu
	b.IDs, b.X, b.Gain, b.Act = ids, x, gain, c.Out(prefix+"act", 4*max(rows, 1)*s.ActLen())
	switch {
	case rows == 0 && norm:
		c.Add(kernels.MoEGateUpNormCall(s, eps, b), barrier)
	case rows == 0:
		c.Add(kernels.MoEGateUpCall(s, b), barrier)
	case norm:
		c.Add(kernels.MoEGateUpNormRowsCall(s, rows, eps, b), barrier)
	default:
		c.Add(kernels.MoEGateUpRowsCall(s, rows, b), barrier)
	}
	return b
}

// addDown dispatches moe_down_combine into res for rows rows (rows 0: one row, MOE_BATCH unset).
func (e moeBatchExperts) addDown(c *Ctx, s kernels.MoEShape, ids, weights, act, res, rows int, barrier bool) kernels.MoEDownCombineBuffers[int] {
	b := e.dc
	b.IDs, b.Weights, b.Act, b.Res = ids, weights, act, res
	if rows == 0 {
		c.Add(kernels.MoEDownCombineCall(s, b), barrier)
	} else {
		c.Add(kernels.MoEDownCombineRowsCall(s, rows, b), barrier)
	}
	return b
}

// moeGateUpBatchCase: moe_gate_up (or _norm) over rows rows, each with its own experts (moeBatchIDs).
func moeGateUpBatchCase(s kernels.MoEShape, rows int, norm bool) Case {
	kernel := moeBatchTag(moeKernel("moe_gate_up", norm), rows)
	return Case{
		Name: fmt.Sprintf("%s/%s", kernel, moeTag(s)), Kernels: []string{kernel}, Tol: moeGateUpTol,
		Shape: fmt.Sprintf("%d rows of x and experts (overlapping, disjoint, reordered), H %d, E %d, top-%d, I %d, SI %d; and one row at a time",
			rows, s.H, s.E, s.K, s.I, s.SI),
		Run: func(c *Ctx) error {
			mo := randomMoE(c.R, s)
			ids, x := moeBatchIDs(c.R, s, rows), moeBatchX(c.R, s.H, rows, norm)
			var gain []uint16
			gb := -1
			if norm {
				gain = RandGain(c.R, s.H, 0.5)
				gb = c.In("gain", gain)
			}
			e := moeDeclareExperts(c, mo, true, false)
			all := e.addGateUp(c, s, "", c.In("ids", ids), c.In("x", x), gb, rows, norm, false)
			one := make([]int, rows)
			for r := range rows {
				p := fmt.Sprintf("row%d.", r)
				one[r] = e.addGateUp(c, s, p, c.In(p+"ids", moeRow(ids, r, s.K)), c.In(p+"x", moeRow(x, r, s.H)), gb, 0, norm, false).Act
			}
			if err := c.Step(); err != nil {
				return err
			}
			act := c.F32(all.Act)
			for r := range rows {
				what := fmt.Sprintf("row %d of %d: act", r, rows)
				got := moeRow(act, r, s.ActLen())
				c.Rel(what, got, kernels.MoEGateUp(mo, s, moeRow(ids, r, s.K), moeNormedRow(x, r, s.H, gain)))
				if err := moeBatchInvariant(Bits(what, got, c.F32(one[r]))); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// moeDownBatchCase: moe_down_combine over rows rows, each with its own experts, weights, act and
// residual.
func moeDownBatchCase(s kernels.MoEShape, rows int) Case {
	kernel := moeBatchTag("moe_down_combine", rows)
	return Case{
		Name: fmt.Sprintf("%s/%s", kernel, moeTag(s)), Kernels: []string{kernel}, Tol: moeDownTol,
		Shape: fmt.Sprintf("%d rows of experts (overlapping, disjoint, reordered), act and residual, H %d, E %d, top-%d, I %d, SI %d; and one row at a time",
			rows, s.H, s.E, s.K, s.I, s.SI),
		Run: func(c *Ctx) error {
			r := c.R
			mo := randomMoE(r, s)
			ids, weights := moeBatchIDs(r, s, rows), moeBatchWeights(r, s.K, rows)
			act, res0 := RandFloats(r, rows*s.ActLen(), 0.5), RandFloats(r, rows*s.H, 1)
			e := moeDeclareExperts(c, mo, false, true)
			all := e.addDown(c, s, c.In("ids", ids), c.In("weights", weights), c.In("act", act), c.InOut("res", res0), rows, false)
			one := make([]int, rows)
			for row := range rows {
				p := fmt.Sprintf("row%d.", row)
				one[row] = e.addDown(c, s, c.In(p+"ids", moeRow(ids, row, s.K)), c.In(p+"weights", moeRow(weights, row, s.K+1)),
					c.In(p+"act", moeRow(act, row, s.ActLen())), c.InOut(p+"res", moeRow(res0, row, s.H)), 0, false).Res
			}
			if err := c.Step(); err != nil {
				return err
			}
			res := c.F32(all.Res)
			for row := range rows {
				what := fmt.Sprintf("row %d of %d: res", row, rows)
				got := moeRow(res, row, s.H)
				rowIDs, rowW, rowAct := moeRow(ids, row, s.K), moeRow(weights, row, s.K+1), moeRow(act, row, s.ActLen())
				c.moeRes(what, got, moeRow(res0, row, s.H), func(res []float32) { kernels.MoEDownCombine(mo, s, rowIDs, rowW, rowAct, res, false) })
				if err := moeBatchInvariant(Bits(what, got, c.F32(one[row]))); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// moeBatchChainCase runs the decode step's MoE chain over rows rows — moe_router(_norm) →
// moe_gate_up(_norm) → moe_down_combine, the later dispatches on the router's ids and weights —
// and the same chain once per row with MOE_BATCH unset, checking every row's ids, weights, act
// and res against the references and bit for bit against its one-row chain. With stacked, only
// the experts the rows choose hold data in the stacked tensors (the model's E at little cost;
// reading a wrong expert shows).
func moeBatchChainCase(s kernels.MoEShape, threads, rows int, norm, stacked, heavy bool) Case {
	ks := []string{moeKernel("moe_router", norm), moeKernel("moe_gate_up", norm), "moe_down_combine"}
	for i := range ks {
		ks[i] = moeBatchTag(ks[i], rows)
	}
	return Case{
		Name: fmt.Sprintf("%s/chain_%s_tg%d", ks[0], moeTag(s), threads), Kernels: ks, Tol: moeDownTol, Heavy: heavy,
		Shape: fmt.Sprintf("%d rows, H %d, E %d, top-%d, I %d, SI %d, router threadgroup of %d, then gate/up and down/combine on its ids; and one row at a time",
			rows, s.H, s.E, s.K, s.I, s.SI, threads),
		Run: func(c *Ctx) error {
			ch := newMoEBatchChain(c, s, rows, norm, stacked)
			rt := newMoEBatchRouter(c, s, ch.mo, ch.gain, threads)
			e := moeDeclareExperts(c, ch.mo, true, true)
			all := ch.add(c, rt, e, "", ch.x, ch.res0, rows)
			one := make([]moeChainBuffers, rows)
			for r := range rows {
				one[r] = ch.add(c, rt, e, fmt.Sprintf("row%d.", r), moeRow(ch.x, r, s.H), moeRow(ch.res0, r, s.H), 0)
			}
			if err := c.Step(); err != nil {
				return err
			}
			for r := range rows {
				if err := ch.check(c, rt, all, one[r], r); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// moeBatchChain is a chain case's model and inputs.
type moeBatchChain struct {
	s       kernels.MoEShape
	rows    int
	mo      *model.MoE
	x, res0 []float32
	gain    []uint16 // nil: the plain kernels
}

// moeChainBuffers are one chain's buffers.
type moeChainBuffers struct {
	router kernels.MoERouterBuffers[int]
	act    int
	res    int
}

func newMoEBatchChain(c *Ctx, s kernels.MoEShape, rows int, norm, stacked bool) *moeBatchChain {
	r := c.R
	ch := &moeBatchChain{s: s, rows: rows, x: moeBatchX(r, s.H, rows, norm), res0: RandFloats(r, rows*s.H, 1)}
	if norm {
		ch.gain = RandGain(r, s.H, 0.5)
	}
	if !stacked {
		ch.mo = randomMoE(r, s)
		return ch
	}
	codes := func(rows, cols int) *quant.Matrix { return qmvMatrix(r, rows, cols, 4, true) }
	ch.mo = &model.MoE{Router: RandQ(r, s.E, s.H, 8), SharedExpertGate: RandQ(r, 1, s.H, 8),
		SharedGate: codes(s.SI, s.H), SharedUp: codes(s.SI, s.H), SharedDown: codes(s.H, s.SI)}
	var chosen []uint32
	for row := range rows {
		logits, shared := kernels.MoERouterLogits(ch.mo, moeNormedRow(ch.x, row, s.H, ch.gain))
		ids, _ := kernels.MoERoute(logits, shared, s.K)
		chosen = append(chosen, ids...)
	}
	filled := func(rows, cols, perExpert int) *quant.Matrix {
		m := &quant.Matrix{Rows: rows, Cols: cols, Bits: 4, Words: make([]uint32, rows*cols/8), Scales: make([]uint16, rows*cols/64), Biases: make([]uint16, rows*cols/64)}
		for _, e := range slices.Compact(slices.Sorted(slices.Values(chosen))) {
			part, src := m.RowRange(int(e)*perExpert, perExpert), codes(perExpert, cols)
			copy(part.Words, src.Words)
			copy(part.Scales, src.Scales)
			copy(part.Biases, src.Biases)
		}
		return m
	}
	ch.mo.Gate, ch.mo.Up, ch.mo.Down = filled(s.E*s.I, s.H, s.I), filled(s.E*s.I, s.H, s.I), filled(s.E*s.H, s.I, s.H)
	return ch
}

// add dispatches the chain on x and res0 for rows rows (0: one row, MOE_BATCH unset).
func (ch *moeBatchChain) add(c *Ctx, rt *moeBatchRouter, e moeBatchExperts, prefix string, x, res0 []float32, rows int) moeChainBuffers {
	s := ch.s
	bx := c.In(prefix+"x", x)
	rb := rt.addOn(c, prefix, bx, rows)
	act := e.addGateUp(c, s, prefix, rb.IDs, bx, rt.bs.Gain, rows, ch.gain != nil, true).Act
	res := e.addDown(c, s, rb.IDs, rb.Weights, act, c.InOut(prefix+"res", res0), rows, true).Res
	return moeChainBuffers{router: rb, act: act, res: res}
}

// check compares row r of the chain all with the references and with the one-row chain one.
func (ch *moeBatchChain) check(c *Ctx, rt *moeBatchRouter, all, one moeChainBuffers, r int) error {
	s, rows := ch.s, ch.rows
	if err := rt.check(c, all.router, one.router, r, rows, moeNormedRow(ch.x, r, s.H, ch.gain)); err != nil {
		return err
	}
	ids, weights := moeRow(c.U32(all.router.IDs), r, s.K), moeRow(c.F32(all.router.Weights), r, s.K+1)
	what := fmt.Sprintf("row %d of %d: ", r, rows)
	act := kernels.MoEGateUp(ch.mo, s, ids, moeNormedRow(ch.x, r, s.H, ch.gain))
	gotAct, gotRes := moeRow(c.F32(all.act), r, s.ActLen()), moeRow(c.F32(all.res), r, s.H)
	c.Rel(what+"act", gotAct, act)
	c.moeRes(what+"res", gotRes, moeRow(ch.res0, r, s.H), func(res []float32) { kernels.MoEDownCombine(ch.mo, s, ids, weights, act, res, false) })
	return moeBatchInvariant(errors.Join(Bits(what+"act", gotAct, c.F32(one.act)), Bits(what+"res", gotRes, c.F32(one.res))))
}

// moeBatches are the decode row counts the batched MoE cases run (the qmv cases' qmvBatches).
var moeBatches = qmvBatches

// moeBatchCases: every decode MoE instance at every R on small shapes (edges as moeShapes: H not
// a multiple of 512, E + 1 not of 4, SI ≠ I, K = E), a small chain per R (one simdgroup routing
// every row), the router in passes (E 300: 6 rows a pass, at 8 and 7 rows), and the model's
// shape at R = 8: both routers, and the two decode chains (heavy).
func moeBatchCases() []Case {
	a := kernels.MoEShape{H: 128, E: 16, K: 4, I: 64, SI: 64}
	b := kernels.MoEShape{H: 192, E: 40, K: 5, I: 64, SI: 128}
	keqe := kernels.MoEShape{H: 64, E: 8, K: 8, I: 192, SI: 64}
	passes := kernels.MoEShape{H: 64, E: 300, K: 4, I: 64, SI: 64}
	var out []Case
	for _, r := range moeBatches {
		out = append(out,
			moeRouterBatchCase(a, 64, r, false), moeRouterBatchCase(b, 96, r, true),
			moeGateUpBatchCase(a, r, false), moeGateUpBatchCase(b, r, true), moeGateUpBatchCase(keqe, r, false),
			moeDownBatchCase(a, r), moeDownBatchCase(b, r), moeDownBatchCase(keqe, r),
			moeBatchChainCase(b, 32, r, r%2 == 0, false, false))
	}
	p := moeProduction
	return append(out,
		moeRouterBatchCase(passes, 32, 8, false), moeRouterBatchCase(passes, 64, 7, true),
		moeRouterBatchCase(p, kernels.MoERouterThreads, 8, false), moeRouterBatchCase(p, kernels.MoERouterThreads, 8, true),
		moeBatchChainCase(p, kernels.MoERouterThreads, 8, true, true, true), moeBatchChainCase(p, kernels.MoERouterThreads, 8, false, true, true))
}
