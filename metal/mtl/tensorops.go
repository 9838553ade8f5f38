package mtl

import (
	"fmt"
	"strconv"
	"strings"
)

// TensorOpsMinMacOS is the oldest macOS on which Lily compiles its Metal 4 tensor-op kernels:
// tensor ops came with 26.0 and bfloat tensors with 26.1, and 26.2 is the version the tensor
// paths of other engines on the same hardware require, so Lily does not go below it either.
const TensorOpsMinMacOS = "26.2"

// TensorOps says whether a GPU of family on macOS version macOS ("26.2", or as Device.OSVersion
// writes it, "26.2 (25C56)") runs Lily's tensor-op kernels: on neural accelerators, which only
// Apple10 (M5) GPUs have — earlier GPUs may compile tensor ops but run them on the shader ALUs,
// where the simdgroup kernels are the ones tuned — and with TensorOpsMinMacOS or later. why says,
// in words, why not (or why so).
func TensorOps(family Family, macOS string) (ok bool, why string) {
	if family < FamilyApple10 {
		return false, fmt.Sprintf("the GPU (%s) has no neural accelerators: tensor ops need Apple10 (M5)", family)
	}
	if !versionAtLeast(macOS, TensorOpsMinMacOS) {
		return false, fmt.Sprintf("macOS %s: Lily's tensor-op kernels need macOS %s or later", strings.TrimSpace(macOS), TensorOpsMinMacOS)
	}
	return true, fmt.Sprintf("%s GPU with macOS %s: tensor ops on the neural accelerators", family, strings.Fields(macOS)[0])
}

// versionAtLeast compares dotted versions numerically ("26.10" > "26.2"); text after the first
// space (a build) is ignored, and a version that does not parse is never at least min.
func versionAtLeast(v, min string) bool {
	parse := func(s string) ([]int, bool) {
		f := strings.Fields(s)
		if len(f) == 0 {
			return nil, false
		}
		var out []int
		for _, p := range strings.Split(f[0], ".") {
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 {
				return nil, false
			}
			out = append(out, n)
		}
		return out, true
	}
	a, ok := parse(v)
	b, _ := parse(min)
	if !ok {
		return false
	}
	for i := range max(len(a), len(b)) {
		x, y := 0, 0
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x > y
		}
	}
	return true
}
