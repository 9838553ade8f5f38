package plan

import "fmt"

// Route is how a prefill chunk's matrix work runs on the GPU: the simdgroup-matrix kernels every
// Apple GPU runs, or the tensor-op forms of those that have one, which run on the neural
// accelerators of M5's GPU cores (Metal 4 tensor ops).
type Route int

const (
	Simdgroup Route = iota // simdgroup matrices on the shader ALUs: every chip, the zero value
	Tensor                 // Metal 4 tensor ops on the neural accelerators (Chip.TensorFLOPs)
)

func (r Route) String() string {
	switch r {
	case Simdgroup:
		return "simdgroup"
	case Tensor:
		return "tensor"
	}
	return fmt.Sprintf("Route(%d)", int(r))
}
