package mtl

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// CompileMessage is one diagnostic of the Metal compiler.
type CompileMessage struct {
	File     string // "program_source" for source compiled from a string
	Line     int
	Col      int    // 0 when the compiler gave none
	Severity string // "error", "fatal error", "warning", "note" or "remark"
	Message  string
}

func (m CompileMessage) String() string {
	if m.Col > 0 {
		return fmt.Sprintf("%s:%d:%d: %s: %s", m.File, m.Line, m.Col, m.Severity, m.Message)
	}
	return fmt.Sprintf("%s:%d: %s: %s", m.File, m.Line, m.Severity, m.Message)
}

// CompileError is a failed newLibraryWithSource: Log is the NSError's localizedDescription,
// Messages what ParseCompileLog found in it.
type CompileError struct {
	Log      string
	Messages []CompileMessage
}

func (e *CompileError) Error() string {
	var errs []CompileMessage
	for _, m := range e.Messages {
		if strings.HasSuffix(m.Severity, "error") {
			errs = append(errs, m)
		}
	}
	if len(errs) == 0 {
		if line, _, _ := strings.Cut(strings.TrimSpace(e.Log), "\n"); line != "" {
			return "mtl: compile failed: " + line
		}
		return "mtl: compile failed (no compiler output)"
	}
	s := "mtl: compile failed: " + errs[0].String()
	if len(errs) > 1 {
		s += fmt.Sprintf(" (and %d more errors)", len(errs)-1)
	}
	return s
}

// diagLine matches clang-style diagnostics, which is what the Metal compiler prints:
// "program_source:12:5: error: use of undeclared identifier 'x'".
var diagLine = regexp.MustCompile(`^(.+?):(\d+):(?:(\d+):)? (fatal error|error|warning|note|remark): (.*)$`)

// ParseCompileLog extracts the diagnostics from a Metal compiler log; source excerpts, caret
// lines and the "Compilation failed:" header are skipped.
func ParseCompileLog(log string) []CompileMessage {
	var out []CompileMessage
	for _, line := range strings.Split(log, "\n") {
		m := diagLine.FindStringSubmatch(strings.TrimRight(line, "\r"))
		if m == nil {
			continue
		}
		ln, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3]) // "" → 0
		out = append(out, CompileMessage{File: m[1], Line: ln, Col: col, Severity: m[4], Message: m[5]})
	}
	return out
}
