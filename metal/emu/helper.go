//go:build linux

package emu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// helper runs dispatches in a child process (runtime/runner.cc), started on first use and again
// after it dies. Buffers travel over its stdin and stdout.
type helper struct {
	path string
	env  []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	in     *bufio.Writer
	inPipe io.WriteCloser
	out    *bufio.Reader
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 1<<20 {
		s.b.Write(p)
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newHelper(path string, tc *toolchain, asan bool) *helper {
	env := os.Environ()
	if asan {
		env = append(env, "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=66:symbolize=1:print_summary=1:detect_stack_use_after_return=0")
		if tc.llvmBin != "" {
			env = append(env, "ASAN_SYMBOLIZER_PATH="+filepath.Join(tc.llvmBin, "llvm-symbolizer"))
		}
	}
	return &helper{path: path, env: env}
}

func (h *helper) start() error {
	if h.cmd != nil {
		return nil
	}
	cmd := exec.Command(h.path)
	cmd.Env = h.env
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	h.stderr = &syncBuffer{}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("emu: starting %s: %w", h.path, err)
	}
	h.cmd, h.inPipe, h.in, h.out = cmd, in, bufio.NewWriterSize(in, 1<<16), bufio.NewReaderSize(out, 1<<16)
	return nil
}

// died collects the helper's exit and stderr after a failed exchange.
func (h *helper) died(ioErr error) error {
	h.inPipe.Close()
	werr := h.cmd.Wait()
	report := h.stderr.String()
	h.cmd = nil
	msg := summarize(report)
	if msg == "" {
		msg = fmt.Sprintf("helper process failed (%v; %v)", ioErr, werr)
	}
	return &KernelError{Msg: msg, Report: report}
}

// summarize picks the headline of a sanitizer report, its first frames in .metal files and the
// SUMMARY line.
func summarize(report string) string {
	var keep []string
	frames := 0
	for _, ln := range strings.Split(report, "\n") {
		t := strings.TrimSpace(ln)
		switch {
		case strings.Contains(t, "ERROR: AddressSanitizer"), strings.HasPrefix(t, "SUMMARY:"),
			strings.HasPrefix(t, "WRITE of size"), strings.HasPrefix(t, "READ of size"):
			keep = append(keep, t)
		case strings.HasPrefix(t, "#") && strings.Contains(t, ".metal:") && frames < 3:
			keep = append(keep, t)
			frames++
		case strings.Contains(t, "is located"):
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 {
		t := strings.TrimSpace(report)
		if len(t) > 2000 {
			t = t[:2000]
		}
		return t
	}
	return strings.Join(keep, "\n")
}

func (h *helper) w32(v uint32) { binary.Write(h.in, binary.LittleEndian, v) }
func (h *helper) w64(v uint64) { binary.Write(h.in, binary.LittleEndian, v) }

func (h *helper) r32() (uint32, error) {
	var v uint32
	err := binary.Read(h.out, binary.LittleEndian, &v)
	return v, err
}

func (h *helper) describe() ([]kernelDesc, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.start(); err != nil {
		return nil, err
	}
	h.w32(1)
	if err := h.in.Flush(); err != nil {
		return nil, h.died(err)
	}
	n, err := h.r32()
	if err != nil {
		return nil, h.died(err)
	}
	ds := make([]kernelDesc, n)
	for i := range ds {
		ln, err := h.r32()
		if err != nil || ln > 4096 {
			return nil, h.died(err)
		}
		name := make([]byte, ln)
		if _, err := io.ReadFull(h.out, name); err != nil {
			return nil, h.died(err)
		}
		ds[i].name = string(name)
		if ds[i].maxThreads, err = h.r32(); err != nil {
			return nil, h.died(err)
		}
		np, err := h.r32()
		if err != nil || np > 64 {
			return nil, h.died(err)
		}
		ds[i].params = make([]paramDesc, np)
		if err := binary.Read(h.out, binary.LittleEndian, ds[i].params); err != nil {
			return nil, h.died(err)
		}
	}
	return ds, nil
}

func (h *helper) run(j *job) error {
	l, bufs := j.l, j.bufs
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.start(); err != nil {
		return err
	}
	h.w32(2)
	h.w32(uint32(l.kernel))
	for _, v := range [][3]uint32{l.groups, l.tg, l.grid} {
		for _, x := range v {
			h.w32(x)
		}
	}
	h.w32(l.order)
	h.w64(l.seed)
	h.w64(l.layoutSeed)
	h.w32(l.stackKiB)
	h.w32(uint32(len(j.fcv)))
	binary.Write(h.in, binary.LittleEndian, j.fcv)
	h.in.Write(j.fcd)
	for _, v := range l.tgLen {
		h.w32(v)
	}
	h.w32(uint32(len(bufs)))
	for _, b := range bufs {
		h.w64(uint64(b.n))
		h.in.Write(b.Bytes())
	}
	for i := range 31 {
		h.w32(uint32(int32(j.bind[i])))
		h.w64(uint64(j.offs[i]))
	}
	if err := h.in.Flush(); err != nil {
		return h.died(err)
	}
	status, err := h.r32()
	if err != nil {
		return h.died(err)
	}
	elen, err := h.r32()
	if err != nil || elen > 1<<20 {
		return h.died(errors.Join(err, errors.New("bad reply")))
	}
	emsg := make([]byte, elen)
	if _, err := io.ReadFull(h.out, emsg); err != nil {
		return h.died(err)
	}
	for _, b := range bufs {
		if _, err := io.ReadFull(h.out, b.Bytes()); err != nil {
			return h.died(err)
		}
	}
	if status != 0 {
		return &KernelError{Msg: string(emsg)}
	}
	return nil
}

func (h *helper) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return nil
	}
	h.w32(3)
	h.in.Flush()
	h.inPipe.Close()
	err := h.cmd.Wait()
	h.cmd = nil
	return err
}
