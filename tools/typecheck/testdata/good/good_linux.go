//go:build linux

package good

// Broken would not compile, but it is not part of a darwin build.
var Broken int = "linux only"
