package kernels

import (
	"reflect"
	"slices"
	"testing"
)

// TestConvVerifyCalls: the group form is the rows call with ConvGroups set and buffers 4 and 5
// added, leaving the rows call's own map untouched; conv1d_commit has the rows geometry.
func TestConvVerifyCalls(t *testing.T) {
	step := Conv1DStepBuffers[int]{X: 1, Taps: 2, Window: 3, U: 4}
	got := Conv1DVerifyCall(8192, ConvThreads, 6, Conv1DVerifyBuffers[int]{Conv1DStepBuffers: step, Groups: 5, Ring: 6})
	want := Call[int]{Kernel: "conv1d_step", Constants: map[int]any{ConvChannels: 8192, ConvGroups: true},
		Buffers: map[int]int{0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 5: 6}, Threadgroups: [3]int{32, 6, 1}, Group: [3]int{ConvThreads, 1, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Conv1DVerifyCall: %+v, want %+v", got, want)
	}
	if rows := Conv1DStepRowsCall(8192, ConvThreads, 6, step); len(rows.Constants) != 1 || len(rows.Buffers) != 4 {
		t.Errorf("the rows call after a verify call: %+v", rows)
	}
	commit := Conv1DCommitCall(300, 256, 3, Conv1DCommitBuffers[int]{Window: 7, Ring: 8, Keep: 9})
	want = Call[int]{Kernel: "conv1d_commit", Constants: map[int]any{ConvChannels: 300},
		Buffers: map[int]int{0: 7, 1: 8, 2: 9}, Threadgroups: [3]int{2, 3, 1}, Group: [3]int{256, 1, 1}}
	if !reflect.DeepEqual(commit, want) {
		t.Errorf("Conv1DCommitCall: %+v, want %+v", commit, want)
	}
}

// TestConvGroupLayouts: the groups buffer marks each group's first row with its size; the keep
// buffer puts the kept count there for groups of two rows or more and 0 for a group of one;
// impossible sizes and counts panic.
func TestConvGroupLayouts(t *testing.T) {
	if got := ConvGroupRows([]int{3, 1, 2}); !slices.Equal(got, []uint32{3, 0, 0, 1, 2, 0}) {
		t.Errorf("groups of 3, 1, 2: %v", got)
	}
	if got := ConvKeepRows([]int{3, 1, 2, 4}, []int{2, 1, 0, 4}); !slices.Equal(got, []uint32{2, 0, 0, 0, 0, 0, 4, 0, 0, 0}) {
		t.Errorf("keeping 2, 1, 0, 4: %v", got)
	}
	for _, bad := range []func(){
		func() { ConvGroupRows([]int{2, 0}) },
		func() { ConvKeepRows([]int{2}, []int{3}) },
		func() { ConvKeepRows([]int{2}, []int{-1}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			bad()
		}()
	}
}

// TestConvVerifyReferences: on a group of 3 and a plain row, Conv1DVerify's u are three
// Conv1DStep calls in turn and one, the group's window is unchanged and the plain row's shifted;
// Conv1DCommit keeping 2 leaves the window of the first two of those calls.
func TestConvVerifyReferences(t *testing.T) {
	const c, rows = 5, 4
	w := (ConvKernel - 1) * c
	x, taps, win := recurrentSeq(rows*c, 0.5), recurrentSeq(c*ConvKernel, 0.25), recurrentSeq(rows*w, -0.75)
	groups := ConvGroupRows([]int{3, 1})
	u, ring, got := make([]float32, rows*c), make([]float32, rows*c), slices.Clone(win)
	Conv1DVerify(u, ring, got, taps, x, groups)
	seq, plain := slices.Clone(win[:w]), slices.Clone(win[3*w:])
	want := make([]float32, rows*c)
	var afterTwo []float32
	for i := range 3 {
		Conv1DStep(want[i*c:(i+1)*c], seq, taps, x[i*c:(i+1)*c])
		if i == 1 {
			afterTwo = slices.Clone(seq)
		}
	}
	Conv1DStep(want[3*c:], plain, taps, x[3*c:])
	if !slices.Equal(u, want) || !slices.Equal(ring, x) || !slices.Equal(got[:3*w], win[:3*w]) || !slices.Equal(got[3*w:], plain) {
		t.Fatalf("Conv1DVerify: u %v ring %v window %v", u, ring, got)
	}
	Conv1DCommit(got, ring, ConvKeepRows([]int{3, 1}, []int{2, 1}))
	if !slices.Equal(got[:w], afterTwo) || !slices.Equal(got[w:3*w], win[w:3*w]) || !slices.Equal(got[3*w:], plain) {
		t.Errorf("Conv1DCommit keeping 2: %v, want %v then the rest unchanged", got, afterTwo)
	}
}
