//go:build darwin

package report

import "github.com/lilyformac/lily/metal/mtl"

// probeGPU asks the default Metal device what the report shows, and the macOS version
// with its build ("15.5 (24F74)") as the device was opened on.
func probeGPU() (*GPU, string) {
	d, err := mtl.DefaultDevice()
	if err != nil {
		return &GPU{Error: err.Error(), Families: map[string]bool{}}, ""
	}
	defer d.Release()
	info := d.Info()
	g := &GPU{Name: info.Name, Family: info.Family.String(), MetalFamily: info.MetalFamily.String(), Families: map[string]bool{},
		RecommendedMaxWorkingSetBytes: info.RecommendedMaxWorkingSetSize, MaxThreadgroupMemoryBytes: info.MaxThreadgroupMemoryLength,
		MaxBufferBytes: info.MaxBufferLength, UnifiedMemory: info.HasUnifiedMemory}
	for _, f := range []mtl.Family{mtl.FamilyApple7, mtl.FamilyApple8, mtl.FamilyApple9, mtl.FamilyApple10, mtl.FamilyMetal3, mtl.FamilyMetal4} {
		g.Families[f.String()] = d.SupportsFamily(f)
	}
	return g, d.OSVersion()
}
