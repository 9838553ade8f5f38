package cases

import (
	"errors"
	"fmt"

	"github.com/lilyformac/lily/engine/config"
	"github.com/lilyformac/lily/engine/sample"
	"github.com/lilyformac/lily/metal/kernels"
)

// argmaxBatchFlags are the rows' penalty flags in turn (row r of R takes entry (r+R) % 4), so
// rows beside each other count, mark, do both or neither, each in its own state row.
var argmaxBatchFlags = []uint32{0, kernels.SampleFlagCount, kernels.SampleFlagSeen, kernels.SampleFlagCount | kernels.SampleFlagSeen}

// argmaxBatchCases are the greedy selection's multi-row cases: at every R fewer ids than groups
// (empty chunks) and partial simdgroups; the LM head's 248,320 ids at R = 8 in the production
// geometry (Heavy).
func argmaxBatchCases() []Case {
	var out []Case
	for _, r := range qmvBatches {
		out = append(out, argmaxBatchCase(31, 128, 32, r, false), argmaxBatchCase(1000, 3, 40, r, false))
	}
	n := config.Production().VocabSize
	return append(out, argmaxBatchCase(n, kernels.ArgmaxDefaultGroups, kernels.ArgmaxThreads, 8, true))
}

// argmaxBatchCase selects rows sequences' next tokens from their logits rows ([rows][n], each of
// another kind of argmaxGens) in one argmax_partial and one argmax_final dispatch, beside the
// one-row dispatches on each row alone.
func argmaxBatchCase(n, groups, threads, rows int, heavy bool) Case {
	partial, final := fmt.Sprintf("argmax_partial+rows%d", rows), fmt.Sprintf("argmax_final+rows%d", rows)
	return Case{
		Name:    fmt.Sprintf("%s/n%d_g%d_tg%d", partial, n, groups, threads),
		Kernels: []string{partial, final}, Tol: idTol, Heavy: heavy,
		Shape: fmt.Sprintf("%d rows of %d ids (%d groups of %d threads, then a final group per row), each row's own step entry, "+
			"params and token states, in one dispatch and one row at a time", rows, n, groups, threads),
		Run: func(c *Ctx) error {
			in := newArgmaxBatchInputs(c, n, rows)
			all := argmaxBatchBuffers(c, "", in.logits, in.steps, in.params, in.state, groups)
			c.Add(kernels.ArgmaxPartialRowsCall(n, groups, threads, rows, all.partial), false)
			c.Add(kernels.ArgmaxFinalRowsCall(n, groups, threads, rows, all.final), true)
			one := make([]argmaxBuffers, rows)
			for r := range rows {
				one[r] = argmaxBatchBuffers(c, fmt.Sprintf("row%d.", r), recRow(in.logits, r, rows), recRow(in.steps, r, rows),
					recRow(in.params, r, rows), recRow(in.state, r, rows), groups)
				c.Add(kernels.ArgmaxPartialCall(n, groups, threads, one[r].partial), false)
				c.Add(kernels.ArgmaxFinalCall(n, groups, threads, one[r].final), true)
			}
			if err := c.Step(); err != nil {
				return err
			}
			return in.check(c, all, one)
		},
	}
}

// argmaxBatchInputs are a case's rows: logits [rows][n], step entries [rows]{pos, token}, params
// [rows][16] words and token states [rows][n].
type argmaxBatchInputs struct {
	n, rows int
	logits  []float32
	steps   []uint32
	params  []uint32
	state   []uint32
	flags   []uint32
}

// newArgmaxBatchInputs draws each row's logits (of argmaxGens in turn), step entry, flags and
// token states (small counts, some seen).
func newArgmaxBatchInputs(c *Ctx, n, rows int) *argmaxBatchInputs {
	in := &argmaxBatchInputs{n: n, rows: rows, logits: make([]float32, rows*n), state: make([]uint32, rows*n)}
	for r := range rows {
		argmaxGens[(r+rows)%len(argmaxGens)].F(c.R, recRow(in.logits, r, rows))
		flags := argmaxBatchFlags[(r+rows)%len(argmaxBatchFlags)]
		in.flags = append(in.flags, flags)
		in.params = append(in.params, kernels.SampleParams{Flags: flags}.Words()...)
		in.steps = append(in.steps, uint32(100+r), uint32(7*r))
	}
	for i := range in.state {
		in.state[i] = c.R.Uint32N(4) | uint32(c.R.IntN(2))<<31
	}
	return in
}

// argmaxBuffers are one dispatch pair's buffers.
type argmaxBuffers struct {
	partial kernels.ArgmaxPartialBuffers[int]
	final   kernels.ArgmaxFinalBuffers[int]
}

// argmaxBatchBuffers declares the buffers (names prefixed) of a dispatch pair over logits.
func argmaxBatchBuffers(c *Ctx, prefix string, logits []float32, steps, params, state []uint32, groups int) argmaxBuffers {
	rows := len(steps) / 2
	partial := c.Out(prefix+"partial", 8*groups*rows)
	return argmaxBuffers{
		partial: kernels.ArgmaxPartialBuffers[int]{Logits: c.In(prefix+"logits", logits), Partial: partial},
		final: kernels.ArgmaxFinalBuffers[int]{Partial: partial, Step: c.InOut(prefix+"step", steps),
			Params: c.In(prefix+"params", params), State: c.InOut(prefix+"state", state)},
	}
}

// check compares each row's step entry and token states with the reference (engine/sample's
// greedy choice, recorded as its flags say) and its keys, step entry and states, exactly, with
// its one-row dispatch's.
func (in *argmaxBatchInputs) check(c *Ctx, all argmaxBuffers, one []argmaxBuffers) error {
	ids := kernels.ArgmaxRows(in.logits, in.n, in.rows)
	steps, states, keys := c.U32(all.final.Step), c.U32(all.final.State), U64s(c.Bytes(all.partial.Partial))
	for r, id := range ids {
		name := func(what string) string { return recRowName(r, in.rows, what) }
		if cpu := sample.New(sample.Params{VocabLimit: in.n}, nil).Next(recRow(in.logits, r, in.rows)).ID; cpu != id {
			return fmt.Errorf("%s: kernels.Argmax %d, engine/sample %d", name("the reference"), id, cpu)
		}
		state := append([]uint32(nil), recRow(in.state, r, in.rows)...)
		kernels.ArgmaxRecord(state, id, in.flags[r])
		step := recRow(steps, r, in.rows)
		if err := errors.Join(recEqual(name("step.pos"), step[:1], []uint32{in.steps[2*r] + 1}),
			c.ID(name("step.token"), int(step[1]), id), recEqual(name("state"), recRow(states, r, in.rows), state)); err != nil {
			return err
		}
		if err := recNotInvariant(errors.Join(recEqual(name("partial"), recRow(keys, r, in.rows), U64s(c.Bytes(one[r].partial.Partial))),
			recEqual(name("step"), step, c.U32(one[r].final.Step)), recEqual(name("state"), recRow(states, r, in.rows), c.U32(one[r].final.State)))); err != nil {
			return err
		}
	}
	return nil
}
