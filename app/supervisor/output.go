package supervisor

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// output receives the engine's stdout and stderr: it writes each line to the log with a time
// stamp and remembers what the supervisor needs to explain an exit.
type output struct {
	log    io.Writer
	prefix string

	mu        sync.Mutex
	partial   []byte
	last      []string // the last lines, oldest first
	portInUse bool
}

const keepLines = 20

func newOutput(log io.Writer, prefix string) *output { return &output{log: log, prefix: prefix} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.line(string(o.partial[:i]))
		o.partial = o.partial[i+1:]
	}
	if len(o.partial) > 64<<10 { // a runaway line without newline: log it in pieces
		o.line(string(o.partial))
		o.partial = nil
	}
	return len(p), nil
}

func (o *output) line(l string) {
	l = strings.TrimRight(l, "\r")
	fmt.Fprintf(o.log, "%s %s: %s\n", time.Now().Format(logTime), o.prefix, l)
	if portInUseLine(l) {
		o.portInUse = true
	}
	if strings.TrimSpace(l) == "" {
		return
	}
	o.last = append(o.last, l)
	if len(o.last) > keepLines {
		o.last = o.last[len(o.last)-keepLines:]
	}
}

// flush logs a last line that had no newline.
func (o *output) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 {
		o.line(string(o.partial))
		o.partial = nil
	}
}

func (o *output) sawPortInUse() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.portInUse
}

// lastError is the most telling recent line: the last "lily: …" message (the engine's fatal
// errors), else a Go panic's first line, else the last line.
func (o *output) lastError() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.last) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(o.last[i], "lily: "); ok && !strings.HasPrefix(rest, "listening at") && !strings.HasPrefix(rest, "ready at") {
			return rest
		}
	}
	for _, l := range o.last {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return l
		}
	}
	if n := len(o.last); n > 0 {
		return o.last[n-1]
	}
	return ""
}
