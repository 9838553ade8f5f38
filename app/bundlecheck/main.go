// Command bundlecheck checks an assembled Lily.app: Info.plist's keys, the bundled engine (and,
// with -require-app, the app binary) as signed darwin/arm64 Mach-O executables that need no
// later macOS than Info.plist's LSMinimumSystemVersion, and the resources the app loads; with
// -version and -build, that build.sh stamped those versions into it. build.sh runs it on Linux
// and on macOS.
//
//	go run ./app/bundlecheck [-require-app] [-version 1.2.3 -build 42] bin/Lily.app
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	requireApp := flag.Bool("require-app", false, "the app binary (CFBundleExecutable) must be present (macOS builds)")
	version := flag.String("version", "", "CFBundleShortVersionString must be this (build.sh's)")
	build := flag.String("build", "", "CFBundleVersion must be this (build.sh's)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: bundlecheck [-require-app] [-version V -build N] Lily.app")
		os.Exit(2)
	}
	report, err := Check(flag.Arg(0), *requireApp)
	if err == nil {
		err = CheckStamp(flag.Arg(0), *version, *build)
	}
	for _, line := range report {
		fmt.Println(line)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bundlecheck:", err)
		os.Exit(1)
	}
}

// Check verifies the bundle at dir and reports what it saw.
func Check(dir string, requireApp bool) ([]string, error) {
	var report []string
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	contents := filepath.Join(dir, "Contents")

	data, err := os.ReadFile(filepath.Join(contents, "Info.plist"))
	if err != nil {
		return nil, err
	}
	info, err := ParsePlist(data)
	if err != nil {
		return nil, fmt.Errorf("Info.plist: %w", err)
	}
	str := func(key string) string {
		s, ok := info[key].(string)
		if !ok {
			fail("Info.plist: %s is missing or not a string", key)
		}
		return s
	}
	exe := str("CFBundleExecutable")
	id := str("CFBundleIdentifier")
	short, build := str("CFBundleShortVersionString"), str("CFBundleVersion")
	for key, want := range map[string]string{"CFBundlePackageType": "APPL", "LSMinimumSystemVersion": "15.0", "CFBundleInfoDictionaryVersion": "6.0"} {
		if got := str(key); got != want {
			fail("Info.plist: %s = %q, want %q", key, got, want)
		}
	}
	for _, key := range []string{"LSUIElement", "NSHighResolutionCapable"} {
		if info[key] != true {
			fail("Info.plist: %s must be true", key)
		}
	}
	if info["NSSupportsSuddenTermination"] == true {
		fail("Info.plist: sudden termination would skip stopping the engine")
	}
	if strings.Count(id, ".") < 2 {
		fail("Info.plist: CFBundleIdentifier %q is not reverse-DNS", id)
	}
	if !dottedNumbers(short, 3) {
		fail("Info.plist: CFBundleShortVersionString %q: want up to three numbers", short)
	}
	if !dottedNumbers(build, 3) {
		fail("Info.plist: CFBundleVersion %q: want up to three numbers", build)
	}
	if strings.EqualFold(exe, "lily") {
		fail("Info.plist: CFBundleExecutable %q collides with the engine Contents/MacOS/lily on a case-insensitive volume", exe)
	}
	report = append(report, fmt.Sprintf("Info.plist: %s %s (%s), executable %s, agent app (LSUIElement), macOS ≥ 15.0", id, short, build, exe))
	lsMin, _ := info["LSMinimumSystemVersion"].(string)
	minSystem, ok := parseVersion(lsMin)
	if !ok { // reported above (it is not 15.0): judge the binaries against the 15.0 it should be
		minSystem = 15 << 16
	}

	icon := str("CFBundleIconFile")
	if filepath.Ext(icon) == "" {
		icon += ".icns"
	}
	resources := filepath.Join(contents, "Resources")
	need := []string{icon, "default-settings.json"}
	for _, st := range []string{"off", "working", "ready", "error"} {
		need = append(need, "status-"+st+".png", "status-"+st+"@2x.png")
	}
	for _, name := range need {
		if fi, err := os.Stat(filepath.Join(resources, name)); err != nil || fi.Size() == 0 {
			fail("Resources/%s is missing", name)
		}
	}
	report = append(report, fmt.Sprintf("Resources: %d files present", len(need)))

	// A binary that needs a later macOS than Info.plist promises passes every other check, then
	// fails to open on the Macs it was meant for (a cgo link on a newer Mac defaults its minimum
	// to that Mac's macOS unless MACOSX_DEPLOYMENT_TARGET says otherwise).
	binary := func(name string) {
		desc, minOS, err := CheckMachO(filepath.Join(contents, "MacOS", name))
		switch {
		case err != nil:
			fail("MacOS/%s: %v", name, err)
		case minOS > minSystem:
			fail("MacOS/%s needs macOS %s or later (its Mach-O minimum), but Info.plist's LSMinimumSystemVersion promises %s: a Mac on macOS %s could not open it; build it with MACOSX_DEPLOYMENT_TARGET=%s (build.sh sets it)",
				name, formatVersion(minOS), formatVersion(minSystem), formatVersion(minSystem), formatVersion(minSystem))
		default:
			report = append(report, "MacOS/"+name+": "+desc)
		}
	}
	binary("lily")
	appBin := filepath.Join(contents, "MacOS", exe)
	if _, err := os.Stat(appBin); err == nil {
		binary(exe)
	} else if requireApp {
		fail("MacOS/%s is missing", exe)
	} else {
		report = append(report, "MacOS/"+exe+": not built here (needs a Mac: cgo + darwinkit)")
	}
	if len(problems) > 0 {
		return report, fmt.Errorf("%d problem(s):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return report, nil
}

// CheckStamp checks that the bundle's Info.plist carries the versions build.sh filled into the
// repository's Info.plist (empty: not checked), so a key renamed there cannot leave a release
// saying 0.0.0.
func CheckStamp(dir, short, build string) error {
	data, err := os.ReadFile(filepath.Join(dir, "Contents", "Info.plist"))
	if err != nil {
		return err
	}
	info, err := ParsePlist(data)
	if err != nil {
		return fmt.Errorf("Info.plist: %w", err)
	}
	for key, want := range map[string]string{"CFBundleShortVersionString": short, "CFBundleVersion": build} {
		if got, _ := info[key].(string); want != "" && got != want {
			return fmt.Errorf("Info.plist: %s = %q, but build.sh stamped %q", key, got, want)
		}
	}
	return nil
}

func dottedNumbers(s string, max int) bool {
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > max {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}
