// Package gen reads Metal Shading Language compute kernels (their signatures, attributes and
// function constants) and translates a .metal file into C++ for the CPU emulator in metal/emu.
//
// The translation keeps every line where it was (so #line makes compiler errors, sanitizer
// reports and debuggers point into the .metal file) and changes only what plain C++ cannot
// express:
//
//   - `[[...]]` attributes are blanked (the kernel signature is recorded first);
//   - `constant T name [[function_constant(i)]];` becomes thread_local storage that a generated
//     prepare function loads from the pipeline's constants, and program-scope constants computed
//     from function constants are computed there too;
//   - `is_function_constant_defined(name)` reads a flag set by that function;
//   - `threadgroup T name[N];` in a function body becomes a reference to memory the runtime
//     shares among the threads of the running threadgroup;
//   - the file is wrapped in an anonymous namespace (Metal compiles each file on its own), and a
//     wrapper that binds parameters from buffers, threadgroup memory and built-ins is appended
//     for every kernel (every `[[host_name]]` instantiation of a template kernel).
//
// Source conventions it relies on are in metal/README.md. Lint reports what in a .metal file the
// Metal compiler rejects although the translation compiles (reserved names, double, recursion, …).
package gen

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ParamKind says where a kernel parameter is bound from.
type ParamKind int

// Parameter kinds.
const (
	Buffer      ParamKind = iota + 1 // [[buffer(n)]]
	Threadgroup                      // [[threadgroup(n)]]
	Builtin                          // [[thread_position_in_grid]] and the like
)

// Param is one kernel parameter.
type Param struct {
	Name    string
	Kind    ParamKind
	Index   int    // buffer or threadgroup index; -1 for built-ins
	Builtin string // the attribute of a built-in
	Decl    string // declaration text without the attribute
	// Gate names the bool function constant of a [[buffer(n), function_constant(NAME)]]
	// parameter: the argument exists only in pipelines where the constant is true, so the others
	// need not bind it.
	Gate string
}

// Kernel is a kernel a pipeline can be made from.
type Kernel struct {
	Name       string // host name: the function name, or [[host_name]] of a template instance
	Func       string // C++ expression naming the function: f or f<4>
	Line       int    // line of the declaration in the source
	Params     []Param
	MaxThreads int // [[max_total_threads_per_threadgroup(n)]], 0 if absent
}

// Constant is a function constant declared in the file.
type Constant struct {
	Name     string
	Type     string // MSL scalar type: bool, int, uint, short, ushort, char, uchar, long, ulong, half, bfloat, float
	Index    int
	Line     int
	Optional bool // tested with is_function_constant_defined, so a pipeline may leave it unset
}

// Unit is a translated source file.
type Unit struct {
	Name      string
	Kernels   []Kernel
	Constants []Constant
	CPP       string
	// Metal4 is set when the file includes <metal_tensor> or Metal Performance Primitives: it is
	// then compiled as MSL 4.0 with tensors (the tensor surface must come before the file's
	// anonymous namespace, so the generator asks for it up front).
	Metal4 bool
}

// metal4Includes are the headers that make a file an MSL 4.0 tensor-op file.
var metal4Includes = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*<(metal_tensor|MetalPerformancePrimitives/MetalPerformancePrimitives\.h)>`)

// builtins maps MSL attribute names to the emulator's binder names.
var builtins = map[string]string{
	"thread_position_in_grid":             "tpig",
	"thread_position_in_threadgroup":      "tpitg",
	"threadgroup_position_in_grid":        "tgpig",
	"threads_per_threadgroup":             "tptg",
	"dispatch_threads_per_threadgroup":    "dtptg",
	"threadgroups_per_grid":               "tgpg",
	"threads_per_grid":                    "tpg",
	"thread_index_in_threadgroup":         "tiitg",
	"thread_index_in_simdgroup":           "tiisg",
	"simdgroup_index_in_threadgroup":      "sgitg",
	"simdgroups_per_threadgroup":          "sgptg",
	"dispatch_simdgroups_per_threadgroup": "dsgptg",
	"quadgroup_index_in_threadgroup":      "qgitg",
	"thread_index_in_quadgroup":           "tiiqg",
	"quadgroups_per_threadgroup":          "qgptg",
	"thread_execution_width":              "tew",
	"threads_per_simdgroup":               "tpsg",
}

// ConstantTypes lists the function constant types the emulator supports, with their sizes.
var ConstantTypes = map[string]int{
	"bool": 1, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2, "bfloat": 2,
	"int": 4, "uint": 4, "float": 4, "long": 8, "ulong": 8,
}

// maxIndex is the number of buffer and threadgroup slots (Metal's argument table).
const maxIndex = 31

type attribute struct {
	start, end int    // [start, end) covers "[[...]]"
	body       string // between the brackets, from the masked text
}

type edit struct {
	start, end int
	text       string
}

type translator struct {
	name   string
	src    string // original
	masked string // comments and literals replaced by spaces
	clean  string // masked, attributes replaced by spaces too
	depth  []int  // brace depth before each byte
	attrs  []attribute
	edits  []edit
	unit   Unit
	fcs    map[string]*Constant
	derive []string // "name = expr;" assignments for prepare
}

// Translate parses src (a .metal file called name) and returns its kernels, constants and C++.
func Translate(name, src string) (*Unit, error) {
	t := &translator{name: name, src: src, fcs: map[string]*Constant{}}
	t.unit.Name = name
	t.unit.Metal4 = metal4Includes.MatchString(src)
	t.masked = mask(src)
	t.scanAttributes()
	t.computeDepth()
	if err := t.functionConstants(); err != nil {
		return nil, err
	}
	if err := t.derivedConstants(); err != nil {
		return nil, err
	}
	t.definedChecks()
	if err := t.threadgroupVars(); err != nil {
		return nil, err
	}
	if err := t.kernels(); err != nil {
		return nil, err
	}
	for _, a := range t.attrs {
		t.edits = append(t.edits, edit{a.start, a.end, ""})
	}
	body, err := t.apply()
	if err != nil {
		return nil, err
	}
	t.unit.CPP = t.emit(body)
	return &t.unit, nil
}

func (t *translator) errorf(pos int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", t.name, t.line(pos), fmt.Sprintf(format, args...))
}

func (t *translator) line(pos int) int { return strings.Count(t.src[:pos], "\n") + 1 }

// mask replaces comments, string and character literals by spaces, keeping newlines, so the
// scanners below see only code, at the same byte offsets.
func mask(s string) string {
	b := []byte(s)
	blank := func(i, j int) {
		for k := i; k < j; k++ {
			if b[k] != '\n' {
				b[k] = ' '
			}
		}
	}
	for i := 0; i < len(b); {
		switch {
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			j := i
			for j < len(b) && b[j] != '\n' {
				j++
			}
			blank(i, j)
			i = j
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			j := strings.Index(s[i+2:], "*/")
			end := len(b)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			blank(i, end)
			i = end
		case b[i] == '"' || b[i] == '\'':
			q := b[i]
			j := i + 1
			for j < len(b) && b[j] != q && b[j] != '\n' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(b))
			blank(i+1, end-1) // keep the quotes
			i = end
		default:
			i++
		}
	}
	return string(b)
}

func (t *translator) scanAttributes() {
	m := []byte(t.masked)
	for i := 0; i+1 < len(m); i++ {
		if m[i] != '[' || m[i+1] != '[' {
			continue
		}
		j := strings.Index(t.masked[i+2:], "]]")
		if j < 0 {
			break
		}
		end := i + 2 + j + 2
		t.attrs = append(t.attrs, attribute{i, end, strings.TrimSpace(t.masked[i+2 : end-2])})
		i = end - 1
	}
	c := []byte(t.masked)
	for _, a := range t.attrs {
		for k := a.start; k < a.end; k++ {
			if c[k] != '\n' {
				c[k] = ' '
			}
		}
	}
	t.clean = string(c)
}

func (t *translator) computeDepth() {
	t.depth = make([]int, len(t.clean)+1)
	d := 0
	for i := 0; i < len(t.clean); i++ {
		t.depth[i] = d
		switch t.clean[i] {
		case '{':
			d++
		case '}':
			d--
		}
	}
	t.depth[len(t.clean)] = d
}

// statementStart returns the start of the statement containing pos: the first code after the
// previous ';', '{' or '}' (or preprocessor line).
func (t *translator) statementStart(pos int) int {
	i := t.boundary(pos)
	for i < pos && strings.IndexByte(" \t\r\n", t.clean[i]) >= 0 {
		i++
	}
	return i
}

func (t *translator) boundary(pos int) int {
	for i := pos - 1; i >= 0; i-- {
		switch t.clean[i] {
		case ';', '{', '}':
			return i + 1
		case '\n':
			// a preprocessor directive ends a statement too
			j := i + 1
			for j < len(t.clean) && (t.clean[j] == ' ' || t.clean[j] == '\t') {
				j++
			}
			if j < len(t.clean) && t.clean[j] == '#' && j < pos {
				k := strings.IndexByte(t.clean[j:], '\n')
				if k >= 0 && j+k < pos {
					return j + k + 1
				}
			}
		}
	}
	return 0
}

func (t *translator) attrAt(pos int) *attribute {
	for i := range t.attrs {
		if t.attrs[i].start <= pos && pos < t.attrs[i].end {
			return &t.attrs[i]
		}
	}
	return nil
}

var (
	reIdent   = regexp.MustCompile(`[A-Za-z_]\w*`)
	reFC      = regexp.MustCompile(`^function_constant\s*\(\s*(\d+)\s*\)$`)
	reFCDecl  = regexp.MustCompile(`^\s*constant\s+((?:unsigned\s+)?\w+)\s+(\w+)\s*$`)
	reDerived = regexp.MustCompile(`^\s*constant\s+(\w+)\s+(\w+)\s*=\s*([^;]*)$`)
	reIndex   = regexp.MustCompile(`^(buffer|threadgroup)\s*\(\s*(\d+)\s*\)$`)
	reMaxTh   = regexp.MustCompile(`max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)`)
	reGate    = regexp.MustCompile(`^function_constant\s*\(\s*(\w+)\s*\)$`)
	reHost    = regexp.MustCompile(`^host_name\s*\(\s*"\s*"\s*\)$`)
)

func (t *translator) functionConstants() error {
	for _, a := range t.attrs {
		m := reFC.FindStringSubmatch(a.body)
		if m == nil {
			continue
		}
		if t.depth[a.start] != 0 || t.inParens(a.start) {
			return t.errorf(a.start, "[[function_constant]] is supported only on program-scope constants")
		}
		start := t.statementStart(a.start)
		end := strings.IndexByte(t.clean[a.end:], ';')
		if end < 0 || strings.TrimSpace(t.clean[a.end:a.end+end]) != "" {
			return t.errorf(a.start, "expected ';' after [[function_constant(%s)]]", m[1])
		}
		end += a.end + 1
		d := reFCDecl.FindStringSubmatch(t.clean[start:a.start])
		if d == nil {
			return t.errorf(a.start, "cannot read the function constant declaration %q (want `constant TYPE NAME [[function_constant(i)]];`)", strings.TrimSpace(t.clean[start:a.start]))
		}
		typ, name := d[1], d[2]
		if _, ok := ConstantTypes[typ]; !ok {
			return t.errorf(a.start, "function constant %s has type %s; the emulator supports scalar types only", name, typ)
		}
		idx, _ := strconv.Atoi(m[1])
		for _, c := range t.unit.Constants {
			if c.Index == idx {
				return t.errorf(a.start, "function constants %s and %s share index %d", c.Name, name, idx)
			}
		}
		t.unit.Constants = append(t.unit.Constants, Constant{Name: name, Type: typ, Index: idx, Line: t.line(a.start)})
		t.edits = append(t.edits, edit{start, end, fmt.Sprintf("static thread_local %s %s; static thread_local bool msl_fc_def_%s;", typ, name, name)})
	}
	for i := range t.unit.Constants {
		t.fcs[t.unit.Constants[i].Name] = &t.unit.Constants[i]
	}
	return nil
}

func (t *translator) inParens(pos int) bool {
	d := 0
	for i := pos - 1; i >= 0; i-- {
		switch t.clean[i] {
		case ')':
			d++
		case '(':
			if d == 0 {
				return true
			}
			d--
		case ';', '{', '}':
			return false
		}
	}
	return false
}

// derivedConstants handles program-scope `constant T x = expr;` whose expr uses a function
// constant: Metal evaluates them per pipeline, so they are computed by prepare too.
func (t *translator) derivedConstants() error {
	if len(t.fcs) == 0 {
		return nil
	}
	for i := 0; i < len(t.clean); {
		j := strings.IndexByte(t.clean[i:], ';')
		if j < 0 {
			break
		}
		end := i + j
		start := t.statementStart(end)
		i = end + 1
		if t.depth[start] != 0 {
			continue
		}
		m := reDerived.FindStringSubmatch(t.clean[start:end])
		if m == nil {
			continue
		}
		uses := false
		for _, id := range reIdent.FindAllString(m[3], -1) {
			if t.fcs[id] != nil || id == "is_function_constant_defined" {
				uses = true
			}
		}
		if !uses {
			continue
		}
		expr := t.replaceDefined(m[3])
		t.derive = append(t.derive, fmt.Sprintf("%s = (%s)(%s);", m[2], m[1], strings.TrimSpace(expr)))
		t.edits = append(t.edits, edit{start, end + 1, fmt.Sprintf("static thread_local %s %s;", m[1], m[2])})
	}
	return nil
}

var reDefined = regexp.MustCompile(`is_function_constant_defined\s*\(\s*(\w+)\s*\)`)

func (t *translator) replaceDefined(s string) string {
	return reDefined.ReplaceAllString(s, "msl_fc_def_$1")
}

func (t *translator) definedChecks() {
	for _, m := range reDefined.FindAllStringSubmatchIndex(t.clean, -1) {
		name := t.clean[m[2]:m[3]]
		if c := t.fcs[name]; c != nil {
			c.Optional = true
		}
		if t.insideEdit(m[0]) {
			continue
		}
		t.edits = append(t.edits, edit{m[0], m[1], "msl_fc_def_" + name})
	}
	for i := range t.unit.Constants {
		if t.fcs[t.unit.Constants[i].Name].Optional {
			t.unit.Constants[i].Optional = true
		}
	}
}

func (t *translator) insideEdit(pos int) bool {
	for _, e := range t.edits {
		if e.start <= pos && pos < e.end {
			return true
		}
	}
	return false
}

var reTG = regexp.MustCompile(`\bthreadgroup\b`)

// threadgroupVars rewrites `threadgroup T a[N], b;` declarations in function bodies.
func (t *translator) threadgroupVars() error {
	for _, m := range reTG.FindAllStringIndex(t.clean, -1) {
		pos := m[0]
		if t.depth[pos] == 0 || t.inParens(pos) {
			continue
		}
		start := t.statementStart(pos)
		if strings.TrimSpace(t.clean[start:pos]) != "" {
			continue // not the first word of a statement: a cast or a pointer type
		}
		j := strings.IndexByte(t.clean[pos:], ';')
		if j < 0 {
			continue
		}
		end := pos + j
		decl := t.clean[m[1]:end]
		if strings.ContainsAny(decl, "*&=(") {
			continue // a pointer or reference to threadgroup memory, not a threadgroup variable
		}
		parts := splitTop(decl, ',')
		first := parts[0]
		nameEnd := len(first)
		if k := strings.IndexByte(first, '['); k >= 0 {
			nameEnd = k
		}
		ids := reIdent.FindAllStringIndex(first[:nameEnd], -1)
		if len(ids) < 2 {
			return t.errorf(pos, "cannot read the threadgroup declaration %q", strings.TrimSpace(t.clean[pos:end]))
		}
		last := ids[len(ids)-1]
		typ := strings.TrimSpace(first[:last[0]])
		parts[0] = first[last[0]:]
		var out []string
		for _, p := range parts {
			p = strings.TrimSpace(p)
			name, dims := p, ""
			if k := strings.IndexByte(p, '['); k >= 0 {
				name, dims = strings.TrimSpace(p[:k]), p[k:]
			}
			if !reIdent.MatchString(name) {
				return t.errorf(pos, "cannot read the threadgroup declarator %q", p)
			}
			dims = strings.Join(strings.Fields(dims), "")
			out = append(out, fmt.Sprintf("threadgroup %s (&%s)%s = ::msl_emu::tg_var<%s%s>([]{});", typ, name, dims, typ, dims))
		}
		t.edits = append(t.edits, edit{pos, end + 1, strings.Join(out, " ")})
	}
	return nil
}

// splitTop splits s at sep outside (), [], {} and <> (so a parameter list splits at its
// top-level commas, attributes counting as brackets).
func splitTop(s string, sep byte) []string {
	var parts []string
	d, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{', '<':
			d++
		case ')', ']', '}', '>':
			d--
		case sep:
			if d == 0 {
				parts = append(parts, s[last:i])
				last = i + 1
			}
		}
	}
	return append(parts, s[last:])
}

var (
	reKernelKw   = regexp.MustCompile(`\bkernel\s+void\s+(\w+)\s*\(`)
	reVoidFn     = regexp.MustCompile(`^\s*void\s+(\w+)\s*\(`)
	reDecltype   = regexp.MustCompile(`^\s*decltype\s*\(`)
	reTemplateKw = regexp.MustCompile(`\btemplate\b`)
)

type kernelDecl struct {
	name     string
	pos      int // of the name
	open     int // of '('
	template bool
	maxTh    int
}

func (t *translator) kernels() error {
	var decls []kernelDecl
	add := func(name string, namePos, open int) {
		start := t.boundary(namePos)
		d := kernelDecl{name: name, pos: namePos, open: open, template: reTemplateKw.MatchString(t.clean[start:namePos])}
		for _, a := range t.attrs {
			if a.start >= start && a.start < open {
				if m := reMaxTh.FindStringSubmatch(a.body); m != nil {
					d.maxTh, _ = strconv.Atoi(m[1])
				}
			}
		}
		decls = append(decls, d)
	}
	for _, m := range reKernelKw.FindAllStringSubmatchIndex(t.clean, -1) {
		add(t.clean[m[2]:m[3]], m[2], m[1]-1)
	}
	for _, a := range t.attrs {
		isKernel := false
		for _, p := range splitTop(a.body, ',') {
			if strings.TrimSpace(p) == "kernel" {
				isKernel = true
			}
		}
		if !isKernel || t.insideTemplateInstantiation(a.start) {
			continue
		}
		rest := t.clean[a.end:]
		if m := reVoidFn.FindStringSubmatchIndex(rest); m != nil {
			add(rest[m[2]:m[3]], a.end+m[2], a.end+m[1]-1)
		}
	}
	byName := map[string]*kernelDecl{}
	for i := range decls {
		d := &decls[i]
		if byName[d.name] != nil {
			return t.errorf(d.pos, "kernel %s is declared twice", d.name)
		}
		byName[d.name] = d
	}
	params := map[string][]Param{}
	for _, d := range decls {
		ps, err := t.params(d)
		if err != nil {
			return err
		}
		params[d.name] = ps
		if !d.template {
			t.unit.Kernels = append(t.unit.Kernels, Kernel{Name: d.name, Func: d.name, Line: t.line(d.pos), Params: ps, MaxThreads: d.maxTh})
		}
	}
	// template [[host_name("x")]] [[kernel]] decltype(f<4>) f<4>;
	for _, a := range t.attrs {
		if !reHost.MatchString(a.body) {
			continue
		}
		q := strings.IndexByte(t.masked[a.start:a.end], '"')
		q2 := strings.IndexByte(t.masked[a.start+q+1:a.end], '"')
		host := t.src[a.start+q+1 : a.start+q+1+q2]
		rest := t.clean[a.end:]
		m := reDecltype.FindStringIndex(rest)
		if m == nil {
			return t.errorf(a.start, "expected decltype(f<...>) after [[host_name(%q)]]", host)
		}
		open := a.end + m[1] - 1
		closeP := matchParen(t.clean, open)
		if closeP < 0 {
			return t.errorf(a.start, "unbalanced decltype( after [[host_name(%q)]]", host)
		}
		fn := strings.Join(strings.Fields(t.clean[open+1:closeP]), "")
		base := fn
		if k := strings.IndexByte(fn, '<'); k >= 0 {
			base = fn[:k]
		}
		d := byName[base]
		if d == nil {
			return t.errorf(a.start, "[[host_name(%q)]] instantiates %s, which is not a kernel in this file", host, base)
		}
		t.unit.Kernels = append(t.unit.Kernels, Kernel{Name: host, Func: fn, Line: t.line(a.start), Params: params[base], MaxThreads: d.maxTh})
	}
	seen := map[string]bool{}
	for _, k := range t.unit.Kernels {
		if seen[k.Name] {
			return fmt.Errorf("%s:%d: two kernels are named %s", t.name, k.Line, k.Name)
		}
		seen[k.Name] = true
	}
	return nil
}

func (t *translator) insideTemplateInstantiation(pos int) bool {
	start := t.statementStart(pos)
	for _, a := range t.attrs {
		if a.start >= start && a.start <= pos && reHost.MatchString(a.body) {
			return true
		}
	}
	return false
}

func matchParen(s string, open int) int {
	d := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			d++
		case ')':
			d--
			if d == 0 {
				return i
			}
		}
	}
	return -1
}

func (t *translator) params(d kernelDecl) ([]Param, error) {
	closeP := matchParen(t.masked, d.open)
	if closeP < 0 {
		return nil, t.errorf(d.pos, "kernel %s: unbalanced parameter list", d.name)
	}
	inner := t.masked[d.open+1 : closeP]
	if strings.TrimSpace(inner) == "" || strings.TrimSpace(inner) == "void" {
		return nil, nil
	}
	var ps []Param
	usedBuf, usedTG := map[int]string{}, map[int]string{}
	for _, raw := range splitTop(inner, ',') {
		p := Param{Index: -1}
		text := raw
		var attrBody string
		if k := strings.Index(text, "[["); k >= 0 {
			e := strings.Index(text[k:], "]]")
			if e < 0 {
				return nil, t.errorf(d.pos, "kernel %s: unterminated attribute in %q", d.name, strings.TrimSpace(raw))
			}
			attrBody = strings.TrimSpace(text[k+2 : k+e])
			text = text[:k] + text[k+e+2:]
		}
		p.Decl = strings.Join(strings.Fields(text), " ")
		ids := reIdent.FindAllString(text, -1)
		if len(ids) == 0 {
			return nil, t.errorf(d.pos, "kernel %s: cannot read parameter %q", d.name, strings.TrimSpace(raw))
		}
		p.Name = ids[len(ids)-1]
		if attrBody == "" {
			return nil, t.errorf(d.pos, "kernel %s: parameter %q has no attribute; give every buffer an explicit [[buffer(n)]] (metal/README.md)", d.name, p.Decl)
		}
		items := splitTop(attrBody, ',')
		first := strings.TrimSpace(items[0])
		if err := t.gate(d, &p, items[1:]); err != nil {
			return nil, err
		}
		if m := reIndex.FindStringSubmatch(first); m != nil {
			p.Index, _ = strconv.Atoi(m[2])
			if p.Index >= maxIndex {
				return nil, t.errorf(d.pos, "kernel %s: %s index %d is out of range (0..30)", d.name, m[1], p.Index)
			}
			used := usedBuf
			p.Kind = Buffer
			if m[1] == "threadgroup" {
				used, p.Kind = usedTG, Threadgroup
			}
			if prev, ok := used[p.Index]; ok {
				return nil, t.errorf(d.pos, "kernel %s: parameters %s and %s both use %s(%d)", d.name, prev, p.Name, m[1], p.Index)
			}
			used[p.Index] = p.Name
			if !strings.ContainsAny(text, "*&") {
				return nil, t.errorf(d.pos, "kernel %s: %s parameter %s must be a pointer or a reference", d.name, m[1], p.Name)
			}
		} else if _, ok := builtins[first]; ok {
			p.Kind, p.Builtin = Builtin, first
		} else {
			return nil, t.errorf(d.pos, "kernel %s: parameter %s: attribute [[%s]] is not supported by the emulator", d.name, p.Name, first)
		}
		if p.Gate != "" && p.Kind != Buffer {
			return nil, t.errorf(d.pos, "kernel %s: parameter %s: only a buffer may be gated by a function constant", d.name, p.Name)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// gate reads a buffer parameter's optional function_constant(NAME) after its index: NAME must be
// a bool function constant of the file, or a program-scope bool defined as
// `is_function_constant_defined(FC) && FC` of one (the form that stays false when FC is left
// unset, which an optional constant needs on Metal); the emulator reads FC's value per pipeline.
func (t *translator) gate(d kernelDecl, p *Param, rest []string) error {
	for _, item := range rest {
		m := reGate.FindStringSubmatch(strings.TrimSpace(item))
		if m == nil {
			return t.errorf(d.pos, "kernel %s: parameter %s: attribute %q is not supported by the emulator", d.name, p.Name, strings.TrimSpace(item))
		}
		name := m[1]
		if dm := regexp.MustCompile(`constant\s+bool\s+` + name + `\s*=\s*is_function_constant_defined\s*\(\s*(\w+)\s*\)\s*&&\s*(\w+)\s*;`).FindStringSubmatch(t.src); dm != nil && dm[1] == dm[2] {
			name = dm[1]
		}
		if c := t.fcs[name]; c == nil || c.Type != "bool" {
			return t.errorf(d.pos, "kernel %s: parameter %s: function_constant(%s) must name a bool function constant of the file", d.name, p.Name, m[1])
		}
		p.Gate = name
	}
	return nil
}

// apply performs the edits on the original text, keeping every newline where it was.
func (t *translator) apply() (string, error) {
	sort.SliceStable(t.edits, func(i, j int) bool {
		if t.edits[i].start != t.edits[j].start {
			return t.edits[i].start < t.edits[j].start
		}
		return t.edits[i].end > t.edits[j].end
	})
	var b strings.Builder
	at := 0
	for _, e := range t.edits {
		if e.start < at {
			continue // inside an edit already made (an attribute in a rewritten statement)
		}
		b.WriteString(t.src[at:e.start])
		nl := strings.Count(t.src[e.start:e.end], "\n")
		if strings.Count(e.text, "\n") > nl {
			return "", t.errorf(e.start, "internal error: an edit adds lines")
		}
		b.WriteString(e.text)
		if e.text == "" {
			// blanked attribute: keep the columns too
			for _, c := range t.src[e.start:e.end] {
				if c == '\n' {
					b.WriteByte('\n')
				} else {
					b.WriteByte(' ')
				}
			}
		} else {
			b.WriteString(strings.Repeat("\n", nl-strings.Count(e.text, "\n")))
		}
		at = e.end
	}
	b.WriteString(t.src[at:])
	return b.String(), nil
}

func (t *translator) emit(body string) string {
	var b strings.Builder
	q := strconv.Quote(t.name)
	fmt.Fprintf(&b, "// Generated by metal/emu/gen from %s. Do not edit.\n", t.name)
	if t.unit.Metal4 {
		b.WriteString("#define MSL_EMU_METAL4 1\n")
	}
	b.WriteString("#include \"msl_emu.h\"\nnamespace {\n")
	fmt.Fprintf(&b, "#line 1 %s\n", q)
	b.WriteString(body)
	if !strings.HasSuffix(body, "\n") {
		b.WriteString("\n")
	}
	last := strings.Count(body, "\n") + 1
	fmt.Fprintf(&b, "#line %d %s\n", last, q)
	b.WriteString("static void msl_prepare(const ::msl_emu_rt::LaunchArgs& a) {\n  (void)a;\n")
	for _, c := range t.unit.Constants {
		fmt.Fprintf(&b, "  ::msl_emu::fc_load(%s, msl_fc_def_%s, a, %d);\n", c.Name, c.Name, c.Index)
	}
	for _, d := range t.derive {
		fmt.Fprintf(&b, "  %s\n", d)
	}
	b.WriteString("}\n")
	for i, k := range t.unit.Kernels {
		var binders []string
		for _, p := range k.Params {
			switch p.Kind {
			case Buffer:
				binders = append(binders, fmt.Sprintf("::msl_emu::buffer_b<%d>{}", p.Index))
			case Threadgroup:
				binders = append(binders, fmt.Sprintf("::msl_emu::tg_b<%d>{}", p.Index))
			default:
				binders = append(binders, fmt.Sprintf("::msl_emu::attr_b<::msl_emu::attr::%s>{}", builtins[p.Builtin]))
			}
		}
		args := ""
		if len(binders) > 0 {
			args = ", " + strings.Join(binders, ", ")
		}
		fmt.Fprintf(&b, "#line %d %s\n", k.Line, q)
		fmt.Fprintf(&b, "static void msl_entry_%d(const ::msl_emu_rt::LaunchArgs& a) { ::msl_emu::invoke(&%s, a%s); }\n", i, k.Func, args)
		fmt.Fprintf(&b, "#line %d %s\n", k.Line, q)
		fmt.Fprintf(&b, "static ::msl_emu::KernelReg msl_reg_%d(%s, &%s, &msl_entry_%d, &msl_prepare, %d%s);\n", i, strconv.Quote(k.Name), k.Func, i, k.MaxThreads, args)
	}
	b.WriteString("}  // namespace\n")
	return b.String()
}
