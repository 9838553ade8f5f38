// Command typecheck type-checks Go packages for another platform without a C compiler: it is how
// Linux CI checks the menu-bar app's darwin code, which needs cgo (darwinkit) and so cannot be
// built or vetted there.
//
//	go run ./tools/typecheck -goos darwin -goarch arm64 ./app/...
//
// `go list -deps` resolves the packages and files for the target platform with cgo on
// (GOOS, GOARCH, CGO_ENABLED=1 and CC=false: no compiler runs);
// every package, standard library and dependencies included, is then type-checked from source
// with go/types, where `import "C"` is faked: uses of C.xxx are accepted unchecked, everything
// else is checked. Errors in the named packages fail the run; errors inside dependencies are only
// counted (they are the fake C package's limits, not ours).
//
// One darwinkit-specific mistake is checked too, because it type-checks yet crashes: passing a
// pointer to a darwinkit object (*appkit.MenuItem) where a darwinkit function takes an interface.
// darwinkit converts arguments by reflection and sends a Go pointer to Objective-C as it is,
// instead of the object it points to.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

type listedPackage struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	ImportMap  map[string]string
	DepOnly    bool
	Standard   bool
	Error      *struct{ Err string }
}

func main() {
	verbose := flag.Bool("v", false, "list the packages checked and the dependency messages")
	goos := flag.String("goos", "darwin", "target GOOS")
	goarch := flag.String("goarch", "arm64", "target GOARCH")
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	start := time.Now()
	pkgs, err := list(*goos, *goarch, patterns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "typecheck:", err)
		os.Exit(2)
	}
	targets, depMsgs, errs := check(pkgs, *goarch, *verbose)
	for _, e := range errs {
		fmt.Fprintln(os.Stderr, e)
	}
	fmt.Fprintf(os.Stderr, "typecheck: %s/%s: %d package(s) checked (%d with dependencies), %d error(s), %d dependency message(s) ignored, %.1fs\n",
		*goos, *goarch, targets, len(pkgs), len(errs), depMsgs, time.Since(start).Seconds())
	if len(errs) > 0 {
		os.Exit(1)
	}
}

// list runs go list for the target platform.
func list(goos, goarch string, patterns []string) ([]*listedPackage, error) {
	args := append([]string{"list", "-e", "-deps", "-json=ImportPath,Dir,Name,GoFiles,CgoFiles,Imports,ImportMap,DepOnly,Standard,Error", "--"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=1", "CC=false") // no C compiler may run
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []*listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listedPackage)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// check type-checks every package, each once its imports are done, on all cores.
func check(pkgs []*listedPackage, goarch string, verbose bool) (targets, depMsgs int, errs []string) {
	fset := token.NewFileSet()
	byPath := map[string]*listedPackage{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	sizes := types.SizesFor("gc", goarch)
	done := map[string]chan struct{}{}
	result := map[string]*types.Package{}
	for _, p := range pkgs {
		done[p.ImportPath] = make(chan struct{})
	}
	var mu sync.Mutex
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for _, p := range pkgs {
		if !p.DepOnly {
			targets++
		}
		wg.Add(1)
		go func(p *listedPackage) {
			defer wg.Done()
			defer close(done[p.ImportPath])
			for _, imp := range p.Imports {
				if ch, ok := done[resolve(p, imp)]; ok {
					<-ch
				}
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			var msgs []string
			if p.Error != nil {
				msgs = append(msgs, p.ImportPath+": "+p.Error.Err)
			}
			files, perr := parse(fset, p)
			msgs = append(msgs, perr...)
			conf := types.Config{
				FakeImportC: true,
				Sizes:       sizes,
				Importer: importerFunc(func(path string) (*types.Package, error) {
					if path == "unsafe" {
						return types.Unsafe, nil
					}
					mu.Lock()
					defer mu.Unlock()
					if tp := result[resolve(p, path)]; tp != nil {
						return tp, nil
					}
					return nil, fmt.Errorf("%s: import %q not loaded", p.ImportPath, path)
				}),
				Error: func(err error) { msgs = append(msgs, err.Error()) },
			}
			var info *types.Info
			if !p.DepOnly {
				info = &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
			}
			tp, _ := conf.Check(p.ImportPath, fset, files, info)
			if info != nil {
				msgs = append(msgs, lintObjcPointers(fset, files, info)...)
			}
			mu.Lock()
			defer mu.Unlock()
			result[p.ImportPath] = tp
			if p.DepOnly {
				depMsgs += len(msgs)
				if verbose {
					for _, m := range msgs {
						fmt.Fprintln(os.Stderr, "  (dependency)", m)
					}
				}
				return
			}
			if verbose {
				fmt.Fprintf(os.Stderr, "checked %s (%d files)\n", p.ImportPath, len(files))
			}
			errs = append(errs, msgs...)
		}(p)
	}
	wg.Wait()
	return targets, depMsgs, errs
}

func resolve(p *listedPackage, path string) string {
	if m, ok := p.ImportMap[path]; ok {
		return m
	}
	return path
}

func parse(fset *token.FileSet, p *listedPackage) ([]*ast.File, []string) {
	var files []*ast.File
	var msgs []string
	for _, name := range append(append([]string{}, p.GoFiles...), p.CgoFiles...) {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			msgs = append(msgs, err.Error())
			continue
		}
		files = append(files, f)
	}
	return files, msgs
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

const (
	darwinkit = "github.com/progrium/darwinkit/"
	objcPkg   = darwinkit + "objc"
)

// embedsObject reports whether t is objc.Object or a struct that embeds it (every darwinkit class).
func embedsObject(t types.Type, depth int) bool {
	if n, ok := types.Unalias(t).(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == objcPkg && n.Obj().Name() == "Object" {
		return true
	}
	st, ok := t.Underlying().(*types.Struct)
	if !ok || depth > 8 {
		return false
	}
	for i := 0; i < st.NumFields(); i++ {
		if f := st.Field(i); f.Embedded() && embedsObject(f.Type(), depth+1) {
			return true
		}
	}
	return false
}

// lintObjcPointers finds calls into darwinkit that pass a pointer to a darwinkit object where the
// parameter is an interface: generated methods hand such parameters to objc.Call, whose
// reflection-based conversion passes a Go pointer through unchanged.
func lintObjcPointers(fset *token.FileSet, files []*ast.File, info *types.Info) []string {
	var msgs []string
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || call.Ellipsis.IsValid() {
				return true
			}
			var fn *types.Func
			switch f := ast.Unparen(call.Fun).(type) {
			case *ast.SelectorExpr:
				if sel := info.Selections[f]; sel != nil {
					fn, _ = sel.Obj().(*types.Func)
				} else {
					fn, _ = info.Uses[f.Sel].(*types.Func)
				}
			case *ast.IndexExpr: // a generic call such as objc.Call[T](…)
				if sel, ok := f.X.(*ast.SelectorExpr); ok {
					fn, _ = info.Uses[sel.Sel].(*types.Func)
				}
			case *ast.Ident:
				fn, _ = info.Uses[f].(*types.Func)
			}
			if fn == nil || fn.Pkg() == nil || !strings.HasPrefix(fn.Pkg().Path(), darwinkit) {
				return true
			}
			first := 0
			if fn.Pkg().Path() == objcPkg {
				// The runtime package itself takes Handles by method (objc.Retain even wants the
				// pointer); only objc.Call's message arguments go through reflection.
				if fn.Name() != "Call" {
					return true
				}
				first = 2
			}
			sig, ok := fn.Type().(*types.Signature)
			if !ok {
				return true
			}
			params := sig.Params()
			for i, arg := range call.Args {
				if i < first {
					continue
				}
				var pt types.Type
				switch {
				case sig.Variadic() && i >= params.Len()-1:
					pt = params.At(params.Len() - 1).Type().(*types.Slice).Elem()
				case i < params.Len():
					pt = params.At(i).Type()
				default:
					continue
				}
				ptr, ok := info.Types[arg].Type.(*types.Pointer)
				if types.IsInterface(pt) && ok && embedsObject(ptr.Elem(), 0) {
					msgs = append(msgs, fmt.Sprintf("%s: %s passes %s, a Go pointer, to Objective-C: darwinkit sends it as it is; pass the value",
						fset.Position(arg.Pos()), fn.FullName(), types.TypeString(ptr, nil)))
				}
			}
			return true
		})
	}
	return msgs
}
