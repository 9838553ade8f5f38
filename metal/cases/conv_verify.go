package cases

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lilyformac/lily/metal/kernels"
)

// Speculative decoding's conv: conv1d_step's group form ("+verify") runs a sequence's drafted
// rows in turn and conv1d_commit then keeps some of them (kernels.Conv1DVerifyCall,
// Conv1DCommitCall). Verification is only exact if every row is what plain decoding would have
// computed, so beside each group the cases dispatch today's one-row conv1d_step once per row, one
// after another on a copy of the group's window (a chain), and require the group form's u and the
// committed windows to equal the chain's bit for bit, on the device too; the Go reference checks
// the values within the family's tolerance and the windows exactly.

// convVerifyCases: small shapes (a partial threadgroup) and the model's 8192 channels, each with
// groups mixing plain rows and drafts; conv1d_commit with every kept count of a group of 4.
func convVerifyCases() []Case {
	var out []Case
	for _, s := range []struct{ c, group int }{{31, 32}, {300, kernels.ConvThreads}} {
		for _, sizes := range [][]int{{3, 1, 2}, {1, 1}, {8}} {
			out = append(out, convVerifyCase(s.c, s.group, sizes, 2))
		}
		out = append(out, convCommitCase(s.c, s.group, []int{1, 4, 2, 1}, 5))
	}
	return append(out, convVerifyCase(modelChannels, kernels.ConvThreads, []int{3, 1, 2, 2}, 2),
		convVerifyCase(modelChannels, kernels.ConvThreads, []int{8}, 1),
		convCommitCase(modelChannels, kernels.ConvThreads, []int{1, 4, 2, 1}, 5))
}

// convSizesTag names groups of sizes rows: "3-1-2".
func convSizesTag(sizes []int) string {
	var s []string
	for _, n := range sizes {
		s = append(s, fmt.Sprint(n))
	}
	return strings.Join(s, "-")
}

// convChain is k one-row conv1d_step dispatches, each after a barrier, on one window: rows r0 ..
// r0+k-1 of a verify step as k plain decode steps would run them.
type convChain struct {
	r0     int
	window int   // the chain's window, reset to the group's committed window every step
	x, u   []int // each dispatch's input and output
}

// addConvChain declares a chain of k dispatches from row r0 (buffers named after name).
func addConvChain(c *Ctx, name string, channels, group, taps, r0, k int) convChain {
	ch := convChain{r0: r0, window: c.InOut(name+".window", make([]float32, (kernels.ConvKernel-1)*channels))}
	for i := range k {
		b := kernels.Conv1DStepBuffers[int]{X: c.In(fmt.Sprintf("%s.x%d", name, i), make([]float32, channels)), Taps: taps,
			Window: ch.window, U: c.Out(fmt.Sprintf("%s.u%d", name, i), 4*channels)}
		c.Add(kernels.Conv1DStepCall(channels, group, b), i > 0)
		ch.x, ch.u = append(ch.x, b.X), append(ch.u, b.U)
	}
	return ch
}

// start gives the chain a step's inputs: window the group's committed window, x the step's
// [rows][C] inputs of which it takes its rows.
func (ch convChain) start(c *Ctx, window, x []float32, channels int) {
	c.Set(ch.window, window)
	for i := range ch.x {
		c.Set(ch.x[i], x[(ch.r0+i)*channels:(ch.r0+i+1)*channels])
		c.Poison(ch.u[i])
	}
}

// convVerifyState is a group-form case's dispatch on all rows and its inputs.
type convVerifyState struct {
	channels, rows int
	groups         []uint32
	taps           []float32
	all            kernels.Conv1DVerifyBuffers[int]
}

// addConvVerify declares conv1d_step's group form over groups of sizes rows on window ([rows][3][C]).
func addConvVerify(c *Ctx, channels, group int, sizes []int, window []float32) convVerifyState {
	s := convVerifyState{channels: channels, groups: kernels.ConvGroupRows(sizes), taps: RandFloats(c.R, channels*kernels.ConvKernel, 0.5)}
	s.rows = len(s.groups)
	n := s.rows * channels
	s.all = kernels.Conv1DVerifyBuffers[int]{Conv1DStepBuffers: convBuffers(c, "", c.In("taps", s.taps), window, n),
		Groups: c.In("groups", s.groups), Ring: c.Out("ring", 4*n)}
	c.Add(kernels.Conv1DVerifyCall(channels, group, s.rows, s.all), false)
	return s
}

// input draws a step's x and hands it to the dispatch, poisoning its outputs.
func (s convVerifyState) input(c *Ctx) []float32 {
	x := recScaledRows(c, s.rows, s.channels, 1)
	c.Set(s.all.X, x)
	c.Poison(s.all.U)
	c.Poison(s.all.Ring)
	return x
}

// convVerifyCase runs groups of sizes rows through conv1d_step's group form for steps steps
// (new drafts each step on the same committed windows, plain rows moving on), beside a chain
// per group.
func convVerifyCase(channels, group int, sizes []int, steps int) Case {
	return Case{
		Name:    fmt.Sprintf("conv1d_step+verify/c%d_g%d_groups%s_%dsteps", channels, group, convSizesTag(sizes), steps),
		Kernels: []string{"conv1d_step+verify"}, Tol: convTol,
		Shape: fmt.Sprintf("groups of %v rows of %d channels, threadgroups of %d, %d steps, in one dispatch and one row at a time",
			sizes, channels, group, steps),
		Run: func(c *Ctx) error {
			rows := len(kernels.ConvGroupRows(sizes))
			window := recScaledRows(c, rows, (kernels.ConvKernel-1)*channels, 1)
			committed := slices.Clone(window)
			s := addConvVerify(c, channels, group, sizes, window)
			var chains []convChain
			for r, n := range s.groups {
				if n > 0 {
					chains = append(chains, addConvChain(c, fmt.Sprintf("row%d", r), channels, group, s.all.Taps, r, int(n)))
				}
			}
			u, ring := make([]float32, rows*channels), make([]float32, rows*channels)
			var x []float32
			return c.Steps(steps, func(int) {
				x = s.input(c)
				for _, ch := range chains {
					ch.start(c, recRow(window, ch.r0, rows), x, channels)
				}
			}, func(step int) error {
				kernels.Conv1DVerify(u, ring, window, s.taps, x, s.groups)
				return convVerifyCheck(c, step, s, chains, u, x, window, committed)
			})
		},
	}
}

// convVerifyCheck compares a step's every row: u with the reference within tolerance and with
// its chain bit for bit; the ring with x; the windows with the reference, a group of one row's
// with its one-row dispatch and every other with the window before the first step.
func convVerifyCheck(c *Ctx, step int, s convVerifyState, chains []convChain, u, x, window, committed []float32) error {
	gotU, gotW := c.F32(s.all.U), c.F32(s.all.Window)
	name := func(r int, what string) string { return recRowName(r, s.rows, fmt.Sprintf("step %d: %s", step, what)) }
	for _, ch := range chains {
		for i, ub := range ch.u {
			r := ch.r0 + i
			c.Rel(name(r, "u"), recRow(gotU, r, s.rows), recRow(u, r, s.rows))
			if err := Bits(name(r, "u"), recRow(gotU, r, s.rows), c.F32(ub)); err != nil {
				return fmt.Errorf("row %d of a group of %d: not the one-row dispatches': %w", i, len(ch.u), err)
			}
		}
	}
	if err := Bits(fmt.Sprintf("step %d: ring", step), c.F32(s.all.Ring), x); err != nil {
		return err
	}
	for r := range s.rows {
		got := recRow(gotW, r, s.rows)
		want := recRow(committed, r, s.rows)
		if s.groups[r] == 1 {
			want = c.F32(chains[slices.IndexFunc(chains, func(ch convChain) bool { return ch.r0 == r })].window)
		}
		if err := Bits(name(r, "window"), got, recRow(window, r, s.rows)); err != nil {
			return err
		}
		if err := Bits(name(r, "window"), got, want); err != nil {
			return fmt.Errorf("a group of %d rows: %w", s.groups[r], err)
		}
	}
	return nil
}
