package cases

import (
	"fmt"
	"slices"

	"github.com/lilyformac/lily/metal/kernels"
)

// convCommitCase runs steps verify steps over groups of sizes rows, each followed by
// conv1d_commit keeping step mod (n+1) rows of a group of n (every count 0..n over n+1 steps; a
// group of one row keeps nothing more, its step having shifted it). Beside each longer group, a
// chain of k one-row dispatches from its committed window for every k in 1..n: after the commit
// the group's window must be the chain of the kept count's, bit for bit (or unchanged at 0), and
// the next step starts from it.
func convCommitCase(channels, group int, sizes []int, steps int) Case {
	return Case{
		Name:    fmt.Sprintf("conv1d_commit/c%d_g%d_groups%s_%dsteps", channels, group, convSizesTag(sizes), steps),
		Kernels: []string{"conv1d_commit", "conv1d_step+verify"}, Tol: convTol,
		// at the model's width, thirteen one-row dispatches a step: one thread order (no thread
		// reads another's channel; the small shapes run every order and ASan)
		Heavy: channels == modelChannels,
		Shape: fmt.Sprintf("groups of %v rows of %d channels, threadgroups of %d, %d verify steps each committing step mod (n+1) rows",
			sizes, channels, group, steps),
		Run: func(c *Ctx) error {
			rows := len(kernels.ConvGroupRows(sizes))
			window := recScaledRows(c, rows, (kernels.ConvKernel-1)*channels, 1)
			s := addConvVerify(c, channels, group, sizes, window)
			keep := c.In("keep", make([]uint32, rows))
			c.Add(kernels.Conv1DCommitCall(channels, group, rows, kernels.Conv1DCommitBuffers[int]{Window: s.all.Window, Ring: s.all.Ring, Keep: keep}), true)
			chains := map[int][]convChain{} // by a longer group's first row: the chains of 1..n rows
			for r, n := range s.groups {
				for k := 1; n > 1 && k <= int(n); k++ {
					chains[r] = append(chains[r], addConvChain(c, fmt.Sprintf("row%d.keep%d", r, k), channels, group, s.all.Taps, r, k))
				}
			}
			u, ring := make([]float32, rows*channels), make([]float32, rows*channels)
			var x, before []float32
			var kept []uint32
			return c.Steps(steps, func(step int) {
				x, before = s.input(c), slices.Clone(window)
				kept = kernels.ConvKeepRows(sizes, convKept(sizes, step))
				c.Set(keep, kept)
				for _, chs := range chains {
					for _, ch := range chs {
						ch.start(c, recRow(window, ch.r0, rows), x, channels)
					}
				}
			}, func(step int) error {
				kernels.Conv1DVerify(u, ring, window, s.taps, x, s.groups)
				kernels.Conv1DCommit(window, ring, kept)
				return convCommitCheck(c, step, s, chains, kept, window, before)
			})
		},
	}
}

// convKept is the rows each group keeps at step step: step mod (n+1).
func convKept(sizes []int, step int) []int {
	kept := make([]int, len(sizes))
	for g, n := range sizes {
		kept[g] = step % (n + 1)
	}
	return kept
}

// convCommitCheck compares every row's window after the commit with the reference, and a longer
// group's with its chain of the kept count (or, keeping none, with the window before the step).
func convCommitCheck(c *Ctx, step int, s convVerifyState, chains map[int][]convChain, kept []uint32, window, before []float32) error {
	gotW := c.F32(s.all.Window)
	for r := range s.rows {
		name := recRowName(r, s.rows, fmt.Sprintf("step %d: window", step))
		got := recRow(gotW, r, s.rows)
		if err := Bits(name, got, recRow(window, r, s.rows)); err != nil {
			return err
		}
		if s.groups[r] < 2 {
			continue
		}
		want := recRow(before, r, s.rows)
		if k := kept[r]; k > 0 {
			want = c.F32(chains[r][k-1].window)
		}
		if err := Bits(name, got, want); err != nil {
			return fmt.Errorf("a group of %d keeping %d: not the window of as many one-row dispatches: %w", s.groups[r], kept[r], err)
		}
	}
	return nil
}
