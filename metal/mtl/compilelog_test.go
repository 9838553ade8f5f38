package mtl

import (
	"reflect"
	"strings"
	"testing"
)

// Logs in the shape newLibraryWithSource:options:error: puts in localizedDescription: a header,
// then clang-style diagnostics, each followed by the source line and a caret line.
const failedLog = "Compilation failed: \n\n" +
	"program_source:3:5: error: use of undeclared identifier 'acc'\n" +
	"    acc += a[i];\n" +
	"    ^\n" +
	"program_source:7:18: warning: unused variable 'tmp' [-Wunused-variable]\n" +
	"    float tmp = 0.0f;\n" +
	"                 ^\n" +
	"program_source:9:1: error: kernel must have void return type\r\n" +
	"kernel float bad() {\n" +
	"^\n" +
	"program_source:2:10: note: candidate function not viable: no known conversion\n" +
	"In file included from program_source:1:\n" +
	"2 errors generated.\n"

func TestParseCompileLog(t *testing.T) {
	got := ParseCompileLog(failedLog)
	want := []CompileMessage{
		{"program_source", 3, 5, "error", "use of undeclared identifier 'acc'"},
		{"program_source", 7, 18, "warning", "unused variable 'tmp' [-Wunused-variable]"},
		{"program_source", 9, 1, "error", "kernel must have void return type"},
		{"program_source", 2, 10, "note", "candidate function not viable: no known conversion"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseCompileLog:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseCompileLogOtherShapes(t *testing.T) {
	log := "/tmp/lily/common.h:12: fatal error: 'missing.h' file not found\n" +
		"program_source:40:3: remark: loop unrolled\n" +
		"not a diagnostic: 1:2: error in prose\n"
	got := ParseCompileLog(log)
	want := []CompileMessage{
		{"/tmp/lily/common.h", 12, 0, "fatal error", "'missing.h' file not found"},
		{"program_source", 40, 3, "remark", "loop unrolled"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseCompileLog:\n got %+v\nwant %+v", got, want)
	}
	if ParseCompileLog("") != nil || ParseCompileLog("Compilation failed: \n\n") != nil {
		t.Fatal("logs without diagnostics should give none")
	}
}

func TestCompileErrorMessage(t *testing.T) {
	e := &CompileError{Log: failedLog, Messages: ParseCompileLog(failedLog)}
	want := "mtl: compile failed: program_source:3:5: error: use of undeclared identifier 'acc' (and 1 more errors)"
	if e.Error() != want {
		t.Fatalf("Error() = %q, want %q", e.Error(), want)
	}
	e = &CompileError{Log: "Compiler encountered an internal error\ndetails"}
	if got := e.Error(); got != "mtl: compile failed: Compiler encountered an internal error" {
		t.Fatalf("Error() without diagnostics = %q", got)
	}
	if got := (&CompileError{}).Error(); !strings.Contains(got, "no compiler output") {
		t.Fatalf("Error() of an empty log = %q", got)
	}
	if s := (CompileMessage{"f", 3, 0, "warning", "w"}).String(); s != "f:3: warning: w" {
		t.Fatalf("String() without a column = %q", s)
	}
}
