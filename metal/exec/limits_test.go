package exec

import (
	"strings"
	"testing"
)

// limitedPipeline reports a pipeline's limits as Metal does.
type limitedPipeline struct{ threads, width, static, deviceTGM int }

func (p limitedPipeline) MaxThreads() int                    { return p.threads }
func (p limitedPipeline) ThreadExecutionWidth() int          { return p.width }
func (p limitedPipeline) StaticThreadgroupMemoryLength() int { return p.static }
func (p limitedPipeline) MaxThreadgroupMemoryLength() int    { return p.deviceTGM }

type limitedDevice struct {
	fakeDevice
	pipe limitedPipeline
}

func (d *limitedDevice) Pipeline(string, map[int]any) (Pipeline, error) { return d.pipe, nil }

// TestPipelineLimitsChecked: New refuses a pipeline whose SIMD-group width is not the kernels'
// 32, and a dispatch whose declared plus dynamic threadgroup memory exceeds the device's limit,
// naming the dispatch, the kernel and the limits; within them it succeeds.
func TestPipelineLimitsChecked(t *testing.T) {
	for _, c := range []struct {
		pipe limitedPipeline
		want string
	}{
		{limitedPipeline{1024, 64, 0, 32768}, "dispatch 0 (first): the pipeline's SIMD-group width (threadExecutionWidth) is 64, but the kernels are written for 32"},
		{limitedPipeline{1024, 32, 32768 - 8, 32768}, "dispatch 0 (first): threadgroup memory of 32776 bytes (32760 declared by the kernel + 16 set by the dispatch), but this GPU allows 32768"},
		{limitedPipeline{16, 32, 0, 32768}, "dispatch 0 (first): threadgroups of 32 threads [32 1 1], but this GPU runs the pipeline with at most 16"},
		{limitedPipeline{1024, 32, 32768 - 16, 32768}, ""},
	} {
		d := &limitedDevice{pipe: c.pipe}
		_, err := New(d, fakePlan())
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.pipe, err, c.want)
		}
	}
}
