//go:build linux

package emu

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/ebitengine/purego"
)

// inProcess runs dispatches in a shared library loaded into this process with purego (no cgo:
// with CGO_ENABLED=0 purego's internal fakecgo sets up the C runtime it needs).
type inProcess struct {
	run_         func(l *launch, err *byte, errcap int32) int32
	kernelCount  func() int32
	kernelName   func(i int32, buf *byte, cap int32) int32
	kernelParams func(i int32, out *paramDesc, cap int32, maxThreads *uint32) int32
	launchSize   func() int32
}

var (
	loadMu sync.Mutex
	loaded = map[string]*inProcess{}
)

func loadInProcess(path string) (*inProcess, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if ip := loaded[path]; ip != nil {
		return ip, nil
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("emu: loading %s: %w", path, err)
	}
	ip := &inProcess{}
	purego.RegisterLibFunc(&ip.run_, h, "msl_emu_run")
	purego.RegisterLibFunc(&ip.kernelCount, h, "msl_emu_kernel_count")
	purego.RegisterLibFunc(&ip.kernelName, h, "msl_emu_kernel_name")
	purego.RegisterLibFunc(&ip.kernelParams, h, "msl_emu_kernel_params")
	purego.RegisterLibFunc(&ip.launchSize, h, "msl_emu_launch_size")
	if n := ip.launchSize(); n != launchSize {
		return nil, fmt.Errorf("emu: %s: launch size %d, want %d", path, n, launchSize)
	}
	loaded[path] = ip
	return ip, nil
}

func (ip *inProcess) describe() ([]kernelDesc, error) {
	n := int(ip.kernelCount())
	ds := make([]kernelDesc, n)
	for i := range ds {
		buf := make([]byte, 512)
		ln := ip.kernelName(int32(i), &buf[0], int32(len(buf)))
		if ln < 0 || int(ln) >= len(buf) {
			return nil, fmt.Errorf("emu: kernel %d: bad name", i)
		}
		ds[i].name = string(buf[:ln])
		ps := make([]paramDesc, 64)
		np := ip.kernelParams(int32(i), &ps[0], int32(len(ps)), &ds[i].maxThreads)
		if np < 0 || int(np) > len(ps) {
			return nil, fmt.Errorf("emu: kernel %s: %d parameters", ds[i].name, np)
		}
		ds[i].params = ps[:np]
	}
	return ds, nil
}

func (ip *inProcess) run(j *job) error {
	l := j.l
	total := int(l.groups[0]) * int(l.groups[1]) * int(l.groups[2])
	ranges := split(total, j.workers)
	errs := make([]string, len(ranges))
	var wg sync.WaitGroup
	for i, r := range ranges {
		lc := *l
		lc.groupBegin, lc.groupEnd = uint32(r[0]), uint32(r[1])
		call := func() {
			buf := make([]byte, 4096)
			if ip.run_(&lc, &buf[0], int32(len(buf))) != 0 {
				if k := bytes.IndexByte(buf, 0); k >= 0 {
					buf = buf[:k]
				}
				errs[i] = string(buf)
			}
		}
		if len(ranges) == 1 {
			call()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			call()
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			return &KernelError{Msg: e}
		}
	}
	return nil
}

func (ip *inProcess) close() error { return nil }
