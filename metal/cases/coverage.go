package cases

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lilyformac/lily/metal/exec"
	"github.com/lilyformac/lily/metal/kernels"
)

// Instances lists the kernel instances of a .metal source as a pipeline names them: each
// [[host_name]] of a template kernel and each plain kernel function.
func Instances(src string) []string { return exec.KernelNames(src) }

// Coverage names each kernel instance of files (name → source) that ran does not hold: an
// instance shipped but run by no case. exempt lists instances that need no case, each with the
// reason (reported by nothing, but kept in one place).
func Coverage(files map[string]string, ran map[string]bool, exempt map[string]string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		var missing []string
		for _, k := range Instances(files[name]) {
			if !ran[k] && exempt[k] == "" {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("%s: compiled, but no case runs %s", kernels.Path(name), strings.Join(missing, ", ")))
		}
	}
	return errors.Join(errs...)
}
