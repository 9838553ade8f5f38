//go:build linux

package exec

import (
	"fmt"
	"math/rand/v2"

	"github.com/lilyformac/lily/metal/emu"
	"github.com/lilyformac/lily/metal/plan"
)

// EmuDevice runs plans on the MSL emulator. Metal may run the dispatches between two barriers
// concurrently and in any order, so the emulator runs each such group in GroupOrder: a missing
// barrier between dependent dispatches shows up as a wrong result under Reverse or Shuffle.
type EmuDevice struct {
	Lib        *emu.Library
	Threads    emu.Order // thread order inside threadgroups
	GroupOrder emu.Order // order of the dispatches between barriers
	Seed       uint64
	// LayoutSeed draws the cooperative-tensor layouts of tensor-op kernels (emu.Dispatch).
	LayoutSeed uint64
}

type emuMemory struct{ b *emu.Buffer }

func (m emuMemory) Bytes() []byte { return m.b.Bytes() }

// TensorOps: the emulator runs tensor-op kernels, with cooperative-tensor layouts it draws at
// random (metal/emu).
func (d *EmuDevice) TensorOps() (bool, string) {
	return true, "the MSL emulator's tensor ops, on layouts it draws at random"
}

// Alloc makes a zeroed emulator buffer.
func (d *EmuDevice) Alloc(b plan.Buffer) (Memory, error) {
	return emuMemory{emu.NewBuffer(int(b.Size))}, nil
}

// Free drops the buffer (emulator memory is Go memory).
func (d *EmuDevice) Free(Memory) {}

// Pipeline specialises a kernel of the library.
func (d *EmuDevice) Pipeline(kernel string, constants map[int]any) (Pipeline, error) {
	p, err := d.Lib.Pipeline(kernel, constants)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Encode runs f: the emulator needs no per-thread context.
func (d *EmuDevice) Encode(f func()) { f() }

// Begin starts a step.
func (d *EmuDevice) Begin() (Encoder, error) {
	return &emuEncoder{dev: d, tgMem: map[int]int{}, bufs: map[int]emu.Binding{}}, nil
}

type pending struct {
	pipe *emu.Pipeline
	d    emu.Dispatch
}

type emuEncoder struct {
	dev   *EmuDevice
	pipe  *emu.Pipeline
	bufs  map[int]emu.Binding
	tgMem map[int]int
	group []pending
	err   error
	round uint64
}

func (e *emuEncoder) SetPipeline(p Pipeline) { e.pipe = p.(*emu.Pipeline) }

func (e *emuEncoder) SetBuffer(m Memory, offset int64, index int) {
	e.bufs[index] = emu.Binding{Buffer: m.(emuMemory).b, Offset: int(offset)}
}

func (e *emuEncoder) SetThreadgroupMemory(length, index int) { e.tgMem[index] = length }

// Dispatch queues the dispatch with a snapshot of the bindings (as a Metal encoder records them).
func (e *emuEncoder) Dispatch(threadgroups, group [3]int) {
	bufs, tg := make(map[int]emu.Binding, len(e.bufs)), make(map[int]int, len(e.tgMem))
	for k, v := range e.bufs {
		bufs[k] = v
	}
	for k, v := range e.tgMem {
		tg[k] = v
	}
	e.group = append(e.group, pending{e.pipe, emu.Dispatch{Threadgroups: threadgroups, Group: group, Buffers: bufs, ThreadgroupMem: tg, Order: e.dev.Threads, Seed: e.dev.Seed, LayoutSeed: e.dev.LayoutSeed}})
}

// Barrier runs the queued group.
func (e *emuEncoder) Barrier() {
	if e.err != nil {
		return
	}
	order := make([]int, len(e.group))
	for i := range order {
		order[i] = i
	}
	switch e.dev.GroupOrder {
	case emu.Reverse:
		for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
			order[i], order[j] = order[j], order[i]
		}
	case emu.Shuffle:
		e.round++
		rand.New(rand.NewPCG(e.dev.Seed, e.round)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	for _, i := range order {
		p := e.group[i]
		if err := p.pipe.Dispatch(p.d); err != nil {
			e.err = fmt.Errorf("exec: %s: %w", p.pipe.Kernel(), err)
			break
		}
	}
	e.group = e.group[:0]
}

// Commit runs the remaining group: the emulator runs a step to completion when it is committed,
// which is one of the orders Metal may run committed steps in (commit order).
func (e *emuEncoder) Commit() { e.Barrier() }

// Wait returns the error of the committed work.
func (e *emuEncoder) Wait() error { return e.err }

func (e *emuEncoder) Finish() error {
	e.Commit()
	return e.Wait()
}
