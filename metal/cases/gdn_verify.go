package cases

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lilyformac/lily/metal/kernels"
)

// gdnVerifySmall are the small shapes of the verify and commit cases: columns that do not divide
// among the simdgroups; three value heads reading one key head (whose ring k one of them
// writes); more simdgroups than columns (and than a group's rows); one simdgroup doing every row.
var gdnVerifySmall = []gdnEdge{
	{kernels.GDNShape{HK: 2, HV: 4, DK: 64, DV: 16}, 3, 0},
	{kernels.GDNShape{HK: 1, HV: 3, DK: 32, DV: 33}, 2, 0},
	{kernels.GDNShape{HK: 2, HV: 4, DK: 128, DV: 8}, 16, 0},
	{kernels.GDNShape{HK: 3, HV: 12, DK: 32, DV: 16}, 1, 0},
}

// gdnVerifyCases are gdn_step's group form (verify) and gdn_commit's cases: at each small shape
// and at the model's in the production geometry, a step mixing groups of 3, 1 and 2 rows, two
// plain rows, and one group of 8; commits of every count 0 .. 4 of a group of 4 at the small
// shapes (one dispatch, a group for each), keeping 3 of 4 at the model's.
func gdnVerifyCases() []Case {
	mixed, plain, long := []uint32{3, 0, 0, 1, 2, 0}, []uint32{1, 1}, []uint32{8, 0, 0, 0, 0, 0, 0, 0}
	var out []Case
	for _, e := range gdnVerifySmall {
		for _, g := range [][]uint32{mixed, plain, long} {
			out = append(out, gdnVerifyCase(e.s, e.nsg, g, false))
		}
		out = append(out, gdnCommitCase(e.s, e.nsg, []uint32{0, 1, 2, 3, 4}, false))
	}
	for _, g := range [][]uint32{mixed, plain, long} {
		out = append(out, gdnVerifyCase(gdnModel, kernels.GDNSimdgroups, g, true))
	}
	return append(out, gdnCommitCase(gdnModel, kernels.GDNSimdgroups, []uint32{3}, true))
}

// gdnVerifyCase runs a step of len(groups) rows through the group form beside, for each group,
// one-row gdn_step dispatches of its rows in turn on a copy of its state.
func gdnVerifyCase(s kernels.GDNShape, nsg int, groups []uint32, heavy bool) Case {
	rows := len(groups)
	return Case{
		Name:    fmt.Sprintf("gdn_step+verify/%s_nsg%d_g%s", gdnTag(s), nsg, gdnCounts(groups)),
		Kernels: []string{"gdn_step+verify"}, Tol: gdnTol(int(slices.Max(groups))), Heavy: heavy,
		Shape: fmt.Sprintf("%d rows in groups %v of %d/%d heads × %d/%d, %d simdgroups, beside one-row dispatches of each group's rows in turn",
			rows, groups, s.HK, s.HV, s.DK, s.DV, nsg),
		Run: func(c *Ctx) error {
			if err := errors.Join(s.Validate(), kernels.GDNCheckGroups(groups, nil)); err != nil {
				return err
			}
			p := randGDNParams(c.R, s)
			states := recScaledRows(c, rows, s.StateLen(), 0.1)
			shared := gdnShared(c, p)
			v := gdnVerifyBuffers(c, shared, s, states, groups)
			c.Add(kernels.GDNVerifyCall(s, p.Eps, nsg, rows, v), false)
			chains := gdnChains(c, shared, s, p.Eps, nsg, states, groups, func(r0 int) int { return int(groups[r0]) })
			in := &gdnBatchInputs{}
			return c.Steps(1, func(int) { gdnVerifySet(c, s, in, v, chains, rows) }, func(int) error {
				y, ring, want := make([]float32, rows*s.HV*s.DV), make([]float32, rows*s.RingLen()), slices.Clone(states)
				kernels.GDNVerify(s, p, want, ring, y, in.qkv, in.z, in.a, in.b, groups)
				errs := []error{gdnRingCheck(c, s, c.F32(v.Ring), ring, rows), gdnVerifyY(c, c.F32(v.Y), y, chains, rows)}
				for _, ch := range chains {
					n := int(groups[ch.r0])
					errs = append(errs, gdnChainState(c, s, c.F32(v.State), want, states, ch, n, n == 1))
				}
				return errors.Join(errs...)
			})
		},
	}
}

// gdnCommitCase runs a verify step of groups of 4 rows, one for each count of keeps, and a plain
// row, then gdn_commit keeping that many rows of each group (none of the plain row), beside
// one-row gdn_step dispatches of each group's kept rows on a copy of its state (and of the plain
// row once).
func gdnCommitCase(s kernels.GDNShape, nsg int, keeps []uint32, heavy bool) Case {
	var groups, keep []uint32
	for _, m := range keeps {
		groups, keep = append(groups, 4, 0, 0, 0), append(keep, m, 0, 0, 0)
	}
	groups, keep = append(groups, 1), append(keep, 0)
	rows := len(groups)
	return Case{
		Name:    fmt.Sprintf("gdn_commit/%s_nsg%d_keep%s", gdnTag(s), nsg, gdnCounts(keeps)),
		Kernels: []string{"gdn_commit", "gdn_step+verify"}, Tol: gdnTol(4), Heavy: heavy,
		Shape: fmt.Sprintf("%d groups of 4 rows keeping %v and a plain row, %d/%d heads × %d/%d, %d simdgroups, beside one-row dispatches of the kept rows",
			len(keeps), keeps, s.HK, s.HV, s.DK, s.DV, nsg),
		Run: func(c *Ctx) error {
			if err := errors.Join(s.Validate(), kernels.GDNCheckGroups(groups, keep)); err != nil {
				return err
			}
			p := randGDNParams(c.R, s)
			states := recScaledRows(c, rows, s.StateLen(), 0.1)
			shared := gdnShared(c, p)
			v := gdnVerifyBuffers(c, shared, s, states, groups)
			c.Add(kernels.GDNVerifyCall(s, p.Eps, nsg, rows, v), false)
			c.Add(kernels.GDNCommitCall(s, nsg, rows, kernels.GDNCommitBuffers[int]{State: v.State, Ring: v.Ring, Keep: c.In("keep", keep)}), true)
			chains := gdnChains(c, shared, s, p.Eps, nsg, states, groups, func(r0 int) int {
				if groups[r0] == 1 {
					return 1 // the plain row: the verify step moved it, the commit must not
				}
				return int(keep[r0])
			})
			in := &gdnBatchInputs{}
			return c.Steps(1, func(int) { gdnVerifySet(c, s, in, v, chains, rows) }, func(int) error {
				y, ring, want := make([]float32, rows*s.HV*s.DV), make([]float32, rows*s.RingLen()), slices.Clone(states)
				kernels.GDNVerify(s, p, want, ring, y, in.qkv, in.z, in.a, in.b, groups)
				kernels.GDNCommit(s, want, ring, keep)
				var errs []error
				for _, ch := range chains {
					errs = append(errs, gdnChainState(c, s, c.F32(v.State), want, states, ch, int(groups[ch.r0]), true))
				}
				return errors.Join(errs...)
			})
		},
	}
}

// gdnCounts spells row counts for a case's name: "3.0.0.1.2.0".
func gdnCounts(v []uint32) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ".")
}

// gdnVerifyBuffers declares the group form's buffers for len(groups) rows on states.
func gdnVerifyBuffers(c *Ctx, shared kernels.GDNStepBuffers[int], s kernels.GDNShape, states []float32, groups []uint32) kernels.GDNVerifyBuffers[int] {
	rows := len(groups)
	return kernels.GDNVerifyBuffers[int]{GDNStepBuffers: gdnBuffers(c, "", shared, s, states, rows),
		Groups: c.In("groups", groups), Ring: c.Out("ring", 4*rows*s.RingLen())}
}

// gdnChain is one-row gdn_step dispatches of rows r0, r0+1, … in turn (one buffer set each) on
// state, a copy of row r0's state: what a sequence's rows do decoded one at a time.
type gdnChain struct {
	r0, state int
	rows      []kernels.GDNStepBuffers[int]
}

// gdnChains declares a chain for each group of groups, running(r0) rows long.
func gdnChains(c *Ctx, shared kernels.GDNStepBuffers[int], s kernels.GDNShape, eps float32, nsg int, states []float32, groups []uint32, running func(r0 int) int) []gdnChain {
	var out []gdnChain
	for r0 := 0; r0 < len(groups); r0 += int(groups[r0]) {
		ch := gdnChain{r0: r0, state: c.InOut(fmt.Sprintf("chain%d.state", r0), recRow(states, r0, len(groups)))}
		for t := range running(r0) {
			b := shared
			pre := fmt.Sprintf("chain%d.row%d.", r0, r0+t)
			b.QKV, b.Z = c.In(pre+"qkv", make([]float32, s.Channels())), c.In(pre+"z", make([]float32, s.HV*s.DV))
			b.A, b.Beta = c.In(pre+"a", make([]float32, s.HV)), c.In(pre+"b", make([]float32, s.HV))
			b.State, b.Y = ch.state, c.Out(pre+"y", 4*s.HV*s.DV)
			c.Add(kernels.GDNStepCall(s, eps, nsg, b), t > 0)
			ch.rows = append(ch.rows, b)
		}
		out = append(out, ch)
	}
	return out
}

// gdnVerifySet draws the step's inputs (at rows 0 and R-1 both softplus special cases) and
// uploads them to the group form's buffers and each chain's.
func gdnVerifySet(c *Ctx, s kernels.GDNShape, in *gdnBatchInputs, v kernels.GDNVerifyBuffers[int], chains []gdnChain, rows int) {
	in.draw(c, s, rows, 1)
	in.set(c, v.GDNStepBuffers, 0, rows, rows)
	c.Poison(v.Ring)
	for _, ch := range chains {
		for t, b := range ch.rows {
			in.set(c, b, ch.r0+t, 1, rows)
		}
	}
}

// gdnVerifyY compares every row's y with the reference's and, bit for bit on the device too, with
// its chain's one-row dispatch: drafting keeps outputs byte-identical only while every verify row,
// and the state the commit replays (gdnChainState), is what plain decoding computes — the same
// standard as the multi-row step's batch invariance (gdnBatchCheck). Should Metal's Relaxed math
// contract the group form's arithmetic otherwise, lily doctor --selftest fails here.
func gdnVerifyY(c *Ctx, got, want []float32, chains []gdnChain, rows int) error {
	var errs []error
	for _, ch := range chains {
		for t, b := range ch.rows {
			r := ch.r0 + t
			c.Rel(recRowName(r, rows, "y"), recRow(got, r, rows), recRow(want, r, rows))
			errs = append(errs, Bits(recRowName(r, rows, "y (one-row gdn_step's)"), recRow(got, r, rows), c.F32(b.Y)))
		}
	}
	return errors.Join(errs...)
}

// gdnChainState checks the states of the group of n rows at a chain's first row r0: the states
// of its other rows are as they were (before); state r0 too unless moved, else it is the
// reference's (want) and its chain's.
func gdnChainState(c *Ctx, s kernels.GDNShape, got, want, before []float32, ch gdnChain, n int, moved bool) error {
	rows := len(got) / s.StateLen()
	var errs []error
	for r := ch.r0; r < ch.r0+n; r++ {
		if r > ch.r0 || !moved {
			errs = append(errs, Bits(recRowName(r, rows, "state (untouched)"), recRow(got, r, rows), recRow(before, r, rows)))
		}
	}
	if moved {
		name := recRowName(ch.r0, rows, fmt.Sprintf("state after %d rows", len(ch.rows)))
		c.Rel(name, recRow(got, ch.r0, rows), recRow(want, ch.r0, rows))
		errs = append(errs, Bits(name+" (one-row gdn_step's)", recRow(got, ch.r0, rows), c.F32(ch.state)))
	}
	return errors.Join(errs...)
}

// gdnRingCheck compares each row's ring entry with the reference's part by part (so a small
// part's error is measured against its own scale); v is a copy, bit for bit on any device.
func gdnRingCheck(c *Ctx, s kernels.GDNShape, got, want []float32, rows int) error {
	var errs []error
	for r := range rows {
		g, w := s.Ring(recRow(got, r, rows)), s.Ring(recRow(want, r, rows))
		c.Rel(recRowName(r, rows, "ring k"), g.K, w.K)
		c.Rel(recRowName(r, rows, "ring beta"), g.Beta, w.Beta)
		c.Rel(recRowName(r, rows, "ring decay"), g.Decay, w.Decay)
		errs = append(errs, Bits(recRowName(r, rows, "ring v"), g.V, w.V))
	}
	return errors.Join(errs...)
}
