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

// VariantCoverage names each kernel instance of instances that no case runs in some variant of
// variants: a case runs "<instance>+v" when one of its Kernels is the instance with v among its
// "+suffixes" ("qmv_q4+add+rows3" runs qmv_q4 in the variants add and rows3). The multi-row
// kernels are covered per row count this way ("rows1" … "rows8").
func VariantCoverage(instances []string, cs []Case, variants []string) error {
	ran := map[string]bool{}
	for _, c := range cs {
		for _, k := range c.Kernels {
			parts := strings.Split(k, "+")
			for _, v := range parts[1:] {
				ran[parts[0]+"+"+v] = true
			}
		}
	}
	var errs []error
	for _, k := range instances {
		var missing []string
		for _, v := range variants {
			if !ran[k+"+"+v] {
				missing = append(missing, v)
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("no case runs %s in %s", k, strings.Join(missing, ", ")))
		}
	}
	return errors.Join(errs...)
}
