package jinja

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(v any, args []any, kw *Dict) (any, error)

// arg returns the i-th positional argument, else the keyword name, else def.
func arg(args []any, kw *Dict, i int, name string, def any) any {
	if i >= 0 && i < len(args) {
		return args[i]
	}
	if kw != nil {
		if v, ok := kw.Get(name); ok {
			return v
		}
	}
	return def
}

// globals are transformers' template globals plus Jinja2's defaults that chat templates use.
var globals = map[string]any{
	"raise_exception": Func(func(args []any, kw *Dict) (any, error) {
		return nil, &RaiseError{toStr(arg(args, kw, 0, "message", nil))}
	}),
	"strftime_now": Func(func(args []any, kw *Dict) (any, error) {
		s, _ := isString(arg(args, kw, 0, "format", ""))
		return strftime(time.Now(), s), nil
	}),
	"namespace": Func(func(args []any, kw *Dict) (any, error) {
		d := NewDict()
		if len(args) > 0 {
			src, ok := args[0].(*Dict)
			if !ok {
				return nil, errors.New("TypeError: namespace() argument must be a mapping")
			}
			for _, k := range src.keys {
				d.Set(k, src.m[k])
			}
		}
		if kw != nil {
			for _, k := range kw.keys {
				d.Set(k, kw.m[k])
			}
		}
		return &Namespace{d}, nil
	}),
	"dict": Func(func(args []any, kw *Dict) (any, error) {
		d := NewDict()
		if kw != nil {
			for _, k := range kw.keys {
				d.Set(k, kw.m[k])
			}
		}
		return d, nil
	}),
	"range": Func(builtinRange),
}

func builtinRange(args []any, _ *Dict) (any, error) {
	var n [3]int64
	n[2] = 1
	for i, a := range args {
		z, ok := bigOf(a)
		if _, isF := a.(float64); !ok || isF || !z.IsInt64() || i > 2 {
			return nil, errors.New("TypeError: range() arguments must be integers")
		}
		n[i] = z.Int64()
	}
	switch len(args) {
	case 0:
		return nil, errors.New("TypeError: range expected at least 1 argument, got 0")
	case 1:
		n[0], n[1] = 0, n[0]
	}
	if n[2] == 0 {
		return nil, errors.New("ValueError: range() arg 3 must not be zero")
	}
	var out []any
	for i := n[0]; (n[2] > 0 && i < n[1]) || (n[2] < 0 && i > n[1]); i += n[2] {
		if len(out) == 100000 {
			return nil, errors.New("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).")
		}
		out = append(out, i)
	}
	return out, nil
}

// strftime implements the common directives of Python's datetime.strftime.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"tojson":     filterToJSON,
		"safe":       func(v any, _ []any, _ *Dict) (any, error) { return Markup(toStr(v)), nil },
		"string":     func(v any, _ []any, _ *Dict) (any, error) { return softStr(v), nil },
		"trim":       filterTrim,
		"length":     filterLength,
		"count":      filterLength,
		"items":      filterItems,
		"default":    filterDefault,
		"d":          filterDefault,
		"join":       filterJoin,
		"first":      filterFirst,
		"last":       filterLast,
		"list":       func(v any, _ []any, _ *Dict) (any, error) { l, err := iterate(v); return append([]any{}, l...), err },
		"reverse":    filterReverse,
		"unique":     filterUnique,
		"sort":       filterSort,
		"dictsort":   filterDictsort,
		"min":        func(v any, a []any, kw *Dict) (any, error) { return filterMinMax(v, a, kw, -1) },
		"max":        func(v any, a []any, kw *Dict) (any, error) { return filterMinMax(v, a, kw, 1) },
		"sum":        filterSum,
		"map":        filterMap,
		"select":     func(v any, a []any, kw *Dict) (any, error) { return filterSelect(v, a, false, true) },
		"reject":     func(v any, a []any, kw *Dict) (any, error) { return filterSelect(v, a, false, false) },
		"selectattr": func(v any, a []any, kw *Dict) (any, error) { return filterSelect(v, a, true, true) },
		"rejectattr": func(v any, a []any, kw *Dict) (any, error) { return filterSelect(v, a, true, false) },
		"attr": func(v any, a []any, kw *Dict) (any, error) {
			name, _ := isString(arg(a, kw, 0, "name", ""))
			return getattr(v, name)
		},
		"lower":      strFilter(strings.ToLower),
		"upper":      strFilter(strings.ToUpper),
		"capitalize": strFilter(capitalize),
		"title":      strFilter(jinjaTitle),
		"replace":    filterReplace,
		"indent":     filterIndent,
		"wordcount":  func(v any, _ []any, _ *Dict) (any, error) { return int64(len(wordRe.FindAllString(toStr(v), -1))), nil },
		"abs":        filterAbs,
		"int":        filterInt,
		"float":      filterFloat,
		"round":      filterRound,
		"escape":     filterEscape,
		"e":          filterEscape,
		"format":     func(v any, a []any, _ *Dict) (any, error) { return pyFormat(toStr(v), Tuple(a)) },
	}
}

// softStr is Jinja2's soft_str: Markup stays Markup, anything else becomes str(v).
func softStr(v any) any {
	if m, ok := v.(Markup); ok {
		return m
	}
	return toStr(v)
}

// keepMarkup returns s with the Markup-ness of like (markupsafe's wrapped str methods).
func keepMarkup(like any, s string) any {
	if _, ok := like.(Markup); ok {
		return Markup(s)
	}
	return s
}

func strFilter(fn func(string) string) filterFunc {
	return func(v any, _ []any, _ *Dict) (any, error) { return keepMarkup(v, fn(toStr(v))), nil }
}

// filterToJSON is transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False).
func filterToJSON(v any, args []any, kw *Dict) (any, error) {
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	o.ensureASCII = truthy(arg(args, kw, 0, "ensure_ascii", false))
	switch ind := arg(args, kw, 1, "indent", nil).(type) {
	case nil:
	case string:
		o.hasIndent, o.indent = true, ind
	default:
		n, ok := bigOf(ind)
		if !ok || !n.IsInt64() {
			return nil, fmt.Errorf("TypeError: tojson indent must be an int or a string")
		}
		o.hasIndent, o.indent, o.itemSep = true, strings.Repeat(" ", int(max(n.Int64(), 0))), ","
	}
	if sep := arg(args, kw, 2, "separators", nil); sep != nil {
		items, ok := seqOf(sep)
		if !ok || len(items) != 2 {
			return nil, errors.New("ValueError: tojson separators must be a pair of strings")
		}
		o.itemSep, o.keySep = toStr(items[0]), toStr(items[1])
	}
	o.sortKeys = truthy(arg(args, kw, 3, "sort_keys", false))
	return toJSON(v, o)
}

func filterTrim(v any, args []any, kw *Dict) (any, error) {
	s := toStr(v)
	switch c := arg(args, kw, 0, "chars", nil).(type) {
	case nil:
		s = strings.TrimFunc(s, isSpace)
	default:
		cs, ok := isString(c)
		if !ok {
			return nil, errors.New("TypeError: strip arg must be None or str")
		}
		s = strings.Trim(s, cs)
	}
	return keepMarkup(v, s), nil
}

func filterLength(v any, _ []any, _ *Dict) (any, error) {
	n, err := length(v)
	return int64(n), err
}

func filterItems(v any, _ []any, _ *Dict) (any, error) {
	switch x := v.(type) {
	case Undefined:
		return []any{}, nil
	case *Dict:
		out := make([]any, len(x.keys))
		for i, k := range x.keys {
			out[i] = Tuple{k, x.m[k]}
		}
		return out, nil
	}
	return nil, errors.New("TypeError: Can only get item pairs from a mapping.")
}

func filterDefault(v any, args []any, kw *Dict) (any, error) {
	_, undef := v.(Undefined)
	if undef || (truthy(arg(args, kw, 1, "boolean", false)) && !truthy(v)) {
		return arg(args, kw, 0, "default_value", ""), nil
	}
	return v, nil
}

// attrGetter resolves Jinja2's dotted attribute paths ("a.b", "0") for map/sort/join.
func attrGetter(path any) func(any) (any, error) {
	if path == nil {
		return func(v any) (any, error) { return v, nil }
	}
	parts := strings.Split(toStr(path), ".")
	if _, ok := path.(string); !ok {
		parts = []string{toStr(path)}
	}
	return func(v any) (any, error) {
		for _, p := range parts {
			var err error
			var key any = p
			if n, e := strconv.ParseInt(p, 10, 64); e == nil {
				key = n
			}
			if v, err = getitem(v, key); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
}

func filterJoin(v any, args []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(arg(args, kw, 1, "attribute", nil))
	parts := make([]string, len(items))
	for i, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		parts[i] = toStr(x)
	}
	return strings.Join(parts, toStr(arg(args, kw, 0, "d", ""))), nil
}

func filterFirst(v any, _ []any, _ *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil || len(items) == 0 {
		return Undefined{"No first item, sequence was empty."}, err
	}
	return items[0], nil
}

func filterLast(v any, _ []any, _ *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil || len(items) == 0 {
		return Undefined{"No last item, sequence was empty."}, err
	}
	return items[len(items)-1], nil
}

func filterReverse(v any, _ []any, _ *Dict) (any, error) {
	if s, ok := isString(v); ok {
		r := []rune(s)
		slices.Reverse(r)
		return keepMarkup(v, string(r)), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(items)
	slices.Reverse(out)
	return out, nil
}

// sortKey applies Jinja2's attribute and case_sensitive=False handling.
func sortKey(args []any, kw *Dict, ci, ai int) func(any) (any, error) {
	get := attrGetter(arg(args, kw, ai, "attribute", nil))
	fold := !truthy(arg(args, kw, ci, "case_sensitive", false))
	return func(v any) (any, error) {
		x, err := get(v)
		if s, ok := x.(string); ok && fold {
			return strings.ToLower(s), err
		}
		return x, err
	}
}

func sortBy(items []any, key func(any) (any, error), reverse bool) ([]any, error) {
	keys := make([]any, len(items))
	for i, it := range items {
		var err error
		if keys[i], err = key(it); err != nil {
			return nil, err
		}
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	slices.SortStableFunc(idx, func(a, b int) int {
		c, err := compare(keys[a], keys[b])
		if err != nil {
			cmpErr = err
		}
		if reverse {
			return -c
		}
		return c
	})
	out := make([]any, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, cmpErr
}

func filterSort(v any, args []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return sortBy(items, sortKey(args, kw, 1, 2), truthy(arg(args, kw, 0, "reverse", false)))
}

func filterDictsort(v any, args []any, kw *Dict) (any, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, errors.New("TypeError: dictsort expects a mapping")
	}
	pairs, _ := filterItems(d, nil, nil)
	pos := 0
	if by, _ := isString(arg(args, kw, 1, "by", "key")); by == "value" {
		pos = 1
	}
	key := sortKey(args, kw, 0, -1)
	return sortBy(pairs.([]any), func(p any) (any, error) { return key(p.(Tuple)[pos]) }, truthy(arg(args, kw, 2, "reverse", false)))
}

func filterUnique(v any, args []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	key := sortKey(args, kw, 0, 1)
	var out, seen []any
	for _, it := range items {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(seen, func(s any) bool { return equal(s, k) }) {
			seen, out = append(seen, k), append(out, it)
		}
	}
	return out, nil
}

func filterMinMax(v any, args []any, kw *Dict, sign int) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{"No aggregated item, sequence was empty."}, nil
	}
	key := sortKey(args, kw, 0, 1)
	best, bk := items[0], any(nil)
	if bk, err = key(best); err != nil {
		return nil, err
	}
	for _, it := range items[1:] {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		c, err := compare(k, bk)
		if err != nil {
			return nil, err
		}
		if c*sign > 0 {
			best, bk = it, k
		}
	}
	return best, nil
}

func filterSum(v any, args []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(arg(args, kw, 0, "attribute", nil))
	total := arg(args, kw, 1, "start", int64(0))
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		if total, err = binop("+", total, x); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterMap(v any, args []any, kw *Dict) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	if len(args) == 0 && kw != nil {
		if a, ok := kw.Get("attribute"); ok {
			get := attrGetter(a)
			def, hasDef := kw.Get("default")
			for i, it := range items {
				if out[i], err = get(it); err != nil {
					return nil, err
				}
				if _, undef := out[i].(Undefined); undef && hasDef {
					out[i] = def
				}
			}
			return out, nil
		}
	}
	if len(args) == 0 {
		return nil, errors.New("map requires a filter argument")
	}
	name := toStr(args[0])
	fn, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("no filter named '%s'", name)
	}
	for i, it := range items {
		if out[i], err = fn(it, args[1:], kw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// filterSelect implements select/reject (byAttr false) and selectattr/rejectattr.
func filterSelect(v any, args []any, byAttr, keep bool) (any, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := func(x any) (any, error) { return x, nil }
	if byAttr {
		if len(args) == 0 {
			return nil, errors.New("missing parameter for attribute name")
		}
		get, args = attrGetter(args[0]), args[1:]
	}
	test := func(x any, _ []any) (bool, error) { return truthy(x), nil }
	if len(args) > 0 {
		name := toStr(args[0])
		if test = tests[name]; test == nil {
			return nil, fmt.Errorf("no test named '%s'", name)
		}
		args = args[1:]
	}
	var out []any
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		ok, err := test(x, args)
		if err != nil {
			return nil, err
		}
		if ok == keep {
			out = append(out, it)
		}
	}
	return out, nil
}

func filterReplace(v any, args []any, kw *Dict) (any, error) {
	n := -1
	if c, ok := bigOf(arg(args, kw, 2, "count", nil)); ok {
		n = int(c.Int64())
	}
	s := strings.Replace(toStr(v), toStr(arg(args, kw, 0, "old", "")), toStr(arg(args, kw, 1, "new", "")), n)
	return keepMarkup(v, s), nil
}

func filterIndent(v any, args []any, kw *Dict) (any, error) {
	pad := "    "
	switch w := arg(args, kw, 0, "width", int64(4)).(type) {
	case string:
		pad = w
	default:
		n, _ := bigOf(w)
		if n != nil {
			pad = strings.Repeat(" ", int(max(n.Int64(), 0)))
		}
	}
	first, blank := truthy(arg(args, kw, 1, "first", false)), truthy(arg(args, kw, 2, "blank", false))
	lines := splitLines(toStr(v)+"\n", false) // Jinja2 appends a newline before splitlines
	var b strings.Builder
	b.WriteString(lines[0])
	for _, line := range lines[1:] {
		b.WriteByte('\n')
		if blank || line != "" {
			b.WriteString(pad)
		}
		b.WriteString(line)
	}
	out := b.String()
	if first {
		out = pad + out
	}
	return keepMarkup(v, out), nil
}

var wordRe = regexp.MustCompile(`\w+`)

func filterAbs(v any, _ []any, _ *Dict) (any, error) {
	switch x := v.(type) {
	case float64:
		return math.Abs(x), nil
	case int64, *big.Int, bool:
		z, _ := bigOf(x)
		return normInt(new(big.Int).Abs(z)), nil
	}
	return nil, fmt.Errorf("TypeError: bad operand type for abs(): '%s'", typeName(v))
}

func filterInt(v any, args []any, kw *Dict) (any, error) {
	def := arg(args, kw, 0, "default", int64(0))
	switch x := v.(type) {
	case int64, *big.Int:
		return x, nil
	case bool:
		z, _ := bigOf(x)
		return normInt(z), nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return def, nil
		}
		z, _ := new(big.Float).SetFloat64(math.Trunc(x)).Int(nil)
		return normInt(z), nil
	case string, Markup:
		s := strings.ReplaceAll(strings.TrimFunc(toStr(x), isSpace), "_", "")
		base := 10
		if b, ok := bigOf(arg(args, kw, 1, "base", int64(10))); ok {
			base = int(b.Int64())
		}
		if z, ok := new(big.Int).SetString(s, base); ok {
			return normInt(z), nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			z, _ := new(big.Float).SetFloat64(math.Trunc(f)).Int(nil)
			return normInt(z), nil
		}
	}
	return def, nil
}

func filterFloat(v any, args []any, kw *Dict) (any, error) {
	if f, ok := floatOf(v); ok {
		return f, nil
	}
	if s, ok := isString(v); ok {
		if f, err := strconv.ParseFloat(strings.TrimFunc(s, isSpace), 64); err == nil {
			return f, nil
		}
	}
	return arg(args, kw, 0, "default", 0.0), nil
}

func filterRound(v any, args []any, kw *Dict) (any, error) {
	x, ok := floatOf(v)
	if !ok {
		return nil, fmt.Errorf("TypeError: round expects a number, got %s", typeName(v))
	}
	p, _ := bigOf(arg(args, kw, 0, "precision", int64(0)))
	method := toStr(arg(args, kw, 1, "method", "common"))
	scale := math.Pow(10, float64(p.Int64()))
	switch method {
	case "common":
		// Python: round(value * 10**p) / 10**p with round-half-even on the scaled value
		r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', int(p.Int64()), 64), 64)
		return r, err
	case "ceil":
		return math.Ceil(x*scale) / scale, nil
	case "floor":
		return math.Floor(x*scale) / scale, nil
	}
	return nil, errors.New("FilterArgumentError: method must be common, ceil or floor")
}

func filterEscape(v any, _ []any, _ *Dict) (any, error) {
	if m, ok := v.(Markup); ok {
		return m, nil
	}
	return Markup(htmlEscape(toStr(v))), nil
}

func capitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + strings.ToLower(s[n:])
}

var wordBegin = regexp.MustCompile(`([-\s({\[<]+)`)

// jinjaTitle is Jinja2's do_title: capitalize each chunk after -, whitespace or an opening bracket.
func jinjaTitle(s string) string {
	var b strings.Builder
	last := 0
	for _, loc := range wordBegin.FindAllStringIndex(s, -1) {
		b.WriteString(capitalize(s[last:loc[0]]))
		b.WriteString(s[loc[0]:loc[1]])
		last = loc[1]
	}
	b.WriteString(capitalize(s[last:]))
	return b.String()
}

// pyTitle is Python's str.title.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		if cased && prevCased {
			b.WriteRune(unicode.ToLower(r))
		} else if cased {
			b.WriteRune(unicode.ToTitle(r))
		} else {
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

// splitLines is Python's str.splitlines.
func splitLines(s string, keepEnds bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			end := i + n
			if r == '\r' && end < len(s) && s[end] == '\n' {
				end++
			}
			if keepEnds {
				out = append(out, s[start:end])
			} else {
				out = append(out, s[start:i])
			}
			start, i = end, end
			continue
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

var tests map[string]func(v any, args []any) (bool, error)

func init() {
	cmp := func(op string) func(v any, args []any) (bool, error) {
		return func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("test %s takes one argument", op)
			}
			return cmpop(op, v, args[0])
		}
	}
	isInt := func(v any) bool {
		switch v.(type) {
		case int64, *big.Int:
			return true
		}
		return false
	}
	intArg := func(v any) (*big.Int, bool) {
		if isInt(v) {
			return bigOf(v)
		}
		return nil, false
	}
	tests = map[string]func(v any, args []any) (bool, error){
		"defined":   func(v any, _ []any) (bool, error) { _, u := v.(Undefined); return !u, nil },
		"undefined": func(v any, _ []any) (bool, error) { _, u := v.(Undefined); return u, nil },
		"none":      func(v any, _ []any) (bool, error) { return v == nil, nil },
		"boolean":   func(v any, _ []any) (bool, error) { _, ok := v.(bool); return ok, nil },
		"true":      func(v any, _ []any) (bool, error) { return v == true, nil },
		"false":     func(v any, _ []any) (bool, error) { return v == false, nil },
		"integer":   func(v any, _ []any) (bool, error) { return isInt(v), nil },
		"float":     func(v any, _ []any) (bool, error) { _, ok := v.(float64); return ok, nil },
		"number":    func(v any, _ []any) (bool, error) { return isNumber(v), nil },
		"string":    func(v any, _ []any) (bool, error) { _, ok := isString(v); return ok, nil },
		"mapping":   func(v any, _ []any) (bool, error) { _, ok := v.(*Dict); return ok, nil },
		"iterable": func(v any, _ []any) (bool, error) {
			switch v.(type) {
			case string, Markup, []any, Tuple, *Dict, Undefined:
				return true, nil
			}
			return false, nil
		},
		"sequence": func(v any, _ []any) (bool, error) { // has len() and __getitem__: Undefined too
			switch v.(type) {
			case string, Markup, []any, Tuple, *Dict, Undefined:
				return true, nil
			}
			return false, nil
		},
		"callable": func(v any, _ []any) (bool, error) { _, ok := v.(Func); return ok, nil },
		"escaped":  func(v any, _ []any) (bool, error) { _, ok := v.(Markup); return ok, nil },
		"sameas": func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, errors.New("test sameas takes one argument")
			}
			switch x := v.(type) {
			case nil, bool:
				return v == args[0], nil
			case *Dict, *Namespace:
				return v == args[0], nil
			case []any:
				y, ok := args[0].([]any)
				return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0]), nil
			}
			return false, nil
		},
		"in": func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, errors.New("test in takes one argument")
			}
			return contains(args[0], v)
		},
		"odd": func(v any, _ []any) (bool, error) {
			z, ok := intArg(v)
			return ok && z.Bit(0) == 1, nil
		},
		"even": func(v any, _ []any) (bool, error) {
			z, ok := intArg(v)
			return ok && z.Bit(0) == 0, nil
		},
		"divisibleby": func(v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, errors.New("test divisibleby takes one argument")
			}
			r, err := binop("%", v, args[0])
			return err == nil && equal(r, int64(0)), err
		},
		"lower":  func(v any, _ []any) (bool, error) { s, ok := isString(v); return ok && strings.ToLower(s) == s, nil },
		"upper":  func(v any, _ []any) (bool, error) { s, ok := isString(v); return ok && strings.ToUpper(s) == s, nil },
		"filter": func(v any, _ []any) (bool, error) { _, ok := filters[toStr(v)]; return ok, nil },
		"test":   func(v any, _ []any) (bool, error) { _, ok := tests[toStr(v)]; return ok, nil },
		"eq":     cmp("=="), "equalto": cmp("=="), "==": cmp("=="),
		"ne": cmp("!="), "!=": cmp("!="),
		"lt": cmp("<"), "lessthan": cmp("<"), "<": cmp("<"),
		"le": cmp("<="), "<=": cmp("<="),
		"gt": cmp(">"), "greaterthan": cmp(">"), ">": cmp(">"),
		"ge": cmp(">="), ">=": cmp(">="),
	}
}

// method returns the bound Python method name of v, or nil. Mutating methods are absent,
// as the immutable sandbox forbids them.
func method(v any, name string) Func {
	switch x := v.(type) {
	case string:
		return strMethod(x, name)
	case Markup:
		return strMethod(string(x), name)
	case *Dict:
		switch name {
		case "items":
			return func([]any, *Dict) (any, error) { return filterItems(x, nil, nil) }
		case "keys":
			return func([]any, *Dict) (any, error) { return iterate(x) }
		case "values":
			return func([]any, *Dict) (any, error) {
				out := make([]any, len(x.keys))
				for i, k := range x.keys {
					out[i] = x.m[k]
				}
				return out, nil
			}
		case "get":
			return func(args []any, kw *Dict) (any, error) {
				if k, ok := isString(arg(args, kw, 0, "key", nil)); ok {
					if v, ok := x.Get(k); ok {
						return v, nil
					}
				}
				return arg(args, kw, 1, "default", nil), nil
			}
		}
	case []any, Tuple:
		items, _ := seqOf(x)
		switch name {
		case "index":
			return func(args []any, _ *Dict) (any, error) {
				for i, it := range items {
					if len(args) > 0 && equal(it, args[0]) {
						return int64(i), nil
					}
				}
				return nil, errors.New("ValueError: value is not in list")
			}
		case "count":
			return func(args []any, _ *Dict) (any, error) {
				n := 0
				for _, it := range items {
					if len(args) > 0 && equal(it, args[0]) {
						n++
					}
				}
				return int64(n), nil
			}
		}
	}
	return nil
}

func strMethod(s, name string) Func {
	str := func(args []any, i int) (string, bool, error) {
		if i >= len(args) || args[i] == nil {
			return "", false, nil
		}
		v, ok := isString(args[i])
		if !ok {
			return "", false, fmt.Errorf("TypeError: %s arg must be None or str, not %s", name, typeName(args[i]))
		}
		return v, true, nil
	}
	maxsplit := func(args []any, kw *Dict) int {
		if n, ok := bigOf(arg(args, kw, 1, "maxsplit", int64(-1))); ok {
			return int(n.Int64())
		}
		return -1
	}
	switch name {
	case "startswith", "endswith":
		return func(args []any, _ *Dict) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("TypeError: %s takes at least 1 argument", name)
			}
			sub := s
			if len(args) > 1 {
				v, err := evalSlice(&sliceExpr{&constExpr{s}, &constExpr{args[1]}, &constExpr{arg(args, nil, 2, "", nil)}, nil}, nil)
				if err != nil {
					return nil, err
				}
				sub = v.(string)
			}
			cands := []any{args[0]}
			if t, ok := args[0].(Tuple); ok {
				cands = t
			}
			for _, c := range cands {
				p, ok := isString(c)
				if !ok {
					return nil, fmt.Errorf("TypeError: %s first arg must be str or a tuple of str, not %s", name, typeName(c))
				}
				if (name == "startswith" && strings.HasPrefix(sub, p)) || (name == "endswith" && strings.HasSuffix(sub, p)) {
					return true, nil
				}
			}
			return false, nil
		}
	case "strip", "lstrip", "rstrip":
		return func(args []any, _ *Dict) (any, error) {
			chars, has, err := str(args, 0)
			if err != nil {
				return nil, err
			}
			cut := isSpace
			if has {
				cut = func(r rune) bool { return strings.ContainsRune(chars, r) }
			}
			switch name {
			case "lstrip":
				return strings.TrimLeftFunc(s, cut), nil
			case "rstrip":
				return strings.TrimRightFunc(s, cut), nil
			}
			return strings.TrimFunc(s, cut), nil
		}
	case "split", "rsplit":
		return func(args []any, kw *Dict) (any, error) {
			sep, has, err := str(args, 0)
			if kw != nil {
				if v, ok := kw.Get("sep"); ok && v != nil {
					sep, has = toStr(v), true
				}
			}
			if err != nil {
				return nil, err
			}
			if has && sep == "" {
				return nil, errors.New("ValueError: empty separator")
			}
			return pySplit(s, sep, has, maxsplit(args, kw), name == "rsplit"), nil
		}
	case "splitlines":
		return func(args []any, kw *Dict) (any, error) {
			var out []any
			for _, l := range splitLines(s, truthy(arg(args, kw, 0, "keepends", false))) {
				out = append(out, l)
			}
			return out, nil
		}
	case "upper", "lower", "title", "capitalize", "isdigit", "isalpha", "isspace", "isalnum", "islower", "isupper":
		return func([]any, *Dict) (any, error) {
			switch name {
			case "upper":
				return strings.ToUpper(s), nil
			case "lower":
				return strings.ToLower(s), nil
			case "title":
				return pyTitle(s), nil
			case "capitalize":
				return capitalize(s), nil
			case "islower", "isupper":
				cased := strings.IndexFunc(s, func(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) }) >= 0
				if name == "islower" {
					return cased && strings.ToLower(s) == s, nil
				}
				return cased && strings.ToUpper(s) == s, nil
			}
			class := map[string]func(rune) bool{"isdigit": unicode.IsDigit, "isalpha": unicode.IsLetter, "isspace": isSpace,
				"isalnum": func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }}[name]
			return s != "" && strings.IndexFunc(s, func(r rune) bool { return !class(r) }) < 0, nil
		}
	case "replace":
		return func(args []any, kw *Dict) (any, error) {
			return filterReplace(s, args, kw)
		}
	case "find", "rfind", "index", "rindex", "count":
		return func(args []any, _ *Dict) (any, error) {
			sub, ok, err := str(args, 0)
			if err != nil || !ok {
				return nil, fmt.Errorf("TypeError: %s expects a str argument", name)
			}
			if name == "count" {
				return int64(strings.Count(s, sub)), nil
			}
			i := strings.Index(s, sub)
			if name[0] == 'r' {
				i = strings.LastIndex(s, sub)
			}
			if i < 0 && (name == "index" || name == "rindex") {
				return nil, errors.New("ValueError: substring not found")
			}
			if i < 0 {
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(s[:i])), nil
		}
	case "join":
		return func(args []any, _ *Dict) (any, error) {
			if len(args) != 1 {
				return nil, errors.New("TypeError: join() takes exactly one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := isString(it)
				if !ok {
					return nil, fmt.Errorf("TypeError: sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return strings.Join(parts, s), nil
		}
	case "removeprefix", "removesuffix":
		return func(args []any, _ *Dict) (any, error) {
			a, _, err := str(args, 0)
			if name == "removeprefix" {
				return strings.TrimPrefix(s, a), err
			}
			return strings.TrimSuffix(s, a), err
		}
	}
	return nil
}

// pySplit is Python's str.split/rsplit; without sep it splits on whitespace runs.
func pySplit(s, sep string, hasSep bool, maxsplit int, fromRight bool) []any {
	var parts []string
	switch {
	case hasSep && !fromRight:
		parts = strings.SplitN(s, sep, maxsplit+1)
		if maxsplit < 0 {
			parts = strings.Split(s, sep)
		}
	case hasSep:
		parts = strings.Split(s, sep)
		if maxsplit >= 0 && len(parts) > maxsplit+1 {
			k := len(parts) - maxsplit
			parts = append([]string{strings.Join(parts[:k], sep)}, parts[k:]...)
		}
	default:
		fields := strings.FieldsFunc(s, isSpace)
		if maxsplit >= 0 && len(fields) > maxsplit {
			// the unsplit remainder keeps its inner whitespace
			rest := s
			if !fromRight {
				for range maxsplit {
					rest = strings.TrimLeftFunc(rest, isSpace)
					rest = rest[strings.IndexFunc(rest, isSpace):]
				}
				fields = append(fields[:maxsplit], strings.TrimLeftFunc(rest, isSpace))
			} else {
				for range maxsplit {
					rest = strings.TrimRightFunc(rest, isSpace)
					rest = rest[:strings.LastIndexFunc(rest, isSpace)+1]
				}
				fields = append([]string{strings.TrimRightFunc(rest, isSpace)}, fields[len(fields)-maxsplit:]...)
			}
		}
		parts = fields
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// pyFormat is the str % args operator for the common conversions s r d i f x and %%.
func pyFormat(format string, args any) (any, error) {
	vals := []any{args}
	if t, ok := args.(Tuple); ok {
		vals = t
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			b.WriteByte(format[i])
			continue
		}
		j := i + 1
		for j < len(format) && strings.IndexByte("-+ 0#.0123456789", format[j]) >= 0 {
			j++
		}
		if j == len(format) {
			return nil, errors.New("ValueError: incomplete format")
		}
		spec, conv := format[i+1:j], format[j]
		i = j
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if n >= len(vals) {
			return nil, errors.New("TypeError: not enough arguments for format string")
		}
		v := vals[n]
		n++
		switch conv {
		case 's':
			fmt.Fprintf(&b, "%"+spec+"s", toStr(v))
		case 'r':
			fmt.Fprintf(&b, "%"+spec+"s", repr(v))
		case 'd', 'i', 'x':
			z, ok := bigOf(v)
			if f, isF := v.(float64); isF {
				z, ok = new(big.Int), true
				new(big.Float).SetFloat64(math.Trunc(f)).Int(z)
			}
			if !ok {
				return nil, fmt.Errorf("TypeError: %%%c format: a real number is required, not %s", conv, typeName(v))
			}
			c := conv
			if c == 'i' {
				c = 'd'
			}
			fmt.Fprintf(&b, "%"+spec+string(c), z)
		case 'f', 'F':
			f, ok := floatOf(v)
			if !ok {
				return nil, fmt.Errorf("TypeError: must be real number, not %s", typeName(v))
			}
			fmt.Fprintf(&b, "%"+spec+"f", f)
		default:
			return nil, fmt.Errorf("ValueError: unsupported format character '%c'", conv)
		}
	}
	if n < len(vals) {
		return nil, errors.New("TypeError: not all arguments converted during string formatting")
	}
	return b.String(), nil
}
