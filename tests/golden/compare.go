package golden

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
)

// Compare lists how got (the emulator's answer to step s) differs from want
// (the engine's recorded answer): the status, the content type, JSON or
// not, and then the bodies by shape: the same keys at every level
// (normalized, see below), the same JSON types (null, bool, string,
// integer, fraction, object, array), arrays of the same length compared
// element by element; and by value at the paths of sameEverywhere and
// s.Same, except where s.Loose or s.Ignore say otherwise. Below s.Subset
// paths the emulator may leave keys out.
//
// A path is the keys from the body's root joined by "/", array elements by
// their index; "*" in a pattern matches any one key or index. Keys and
// compared strings are normalized first: each value of wantVars (in want)
// and gotVars (in got) reads as {{name}}, and yyyy.MM.dd as <date>.
func Compare(s Step, want, got Response, wantVars, gotVars map[string]string) []string {
	var diffs []string
	if want.Status != got.Status {
		diffs = append(diffs, fmt.Sprintf("status: the engine answers %d, the emulator %d", want.Status, got.Status))
	}
	if want.ContentType != got.ContentType {
		diffs = append(diffs, fmt.Sprintf("content type: the engine answers %q, the emulator %q", want.ContentType, got.ContentType))
	}
	wantTree, wantJSON := decode(want.Body)
	gotTree, gotJSON := decode(got.Body)
	switch {
	case wantJSON != gotJSON:
		diffs = append(diffs, fmt.Sprintf("body: the engine answers %s, the emulator %s", describeBody(want), describeBody(got)))
		return diffs
	case !wantJSON:
		if strings.TrimSpace(text(want)) != strings.TrimSpace(text(got)) {
			diffs = append(diffs, fmt.Sprintf("text body: the engine answers %q, the emulator %q", text(want), text(got)))
		}
		return diffs
	}
	c := comparer{
		same:   compile(append(append([]string{}, sameEverywhere...), s.Same...)),
		loose:  compile(s.Loose),
		subset: compile(s.Subset),
		ignore: compile(s.Ignore),
		wantN:  newNormalizer(wantVars),
		gotN:   newNormalizer(gotVars),
	}
	c.walk(nil, wantTree, gotTree, false)
	return append(diffs, c.diffs...)
}

func text(r Response) string {
	if r.Text != nil {
		return *r.Text
	}
	return string(r.Body)
}

func describeBody(r Response) string {
	if _, ok := decode(r.Body); ok {
		return "JSON"
	}
	t := text(r)
	if len(t) > 80 {
		t = t[:80] + "…"
	}
	return fmt.Sprintf("text %q", t)
}

type pattern [][]string

func compile(ps []string) pattern {
	out := make(pattern, len(ps))
	for i, p := range ps {
		out[i] = splitPath(p)
	}
	return out
}

func (p pattern) match(path []string) bool {
	for _, pat := range p {
		if len(pat) != len(path) {
			continue
		}
		ok := true
		for i := range pat {
			if pat[i] != "*" && pat[i] != path[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

type normalizer struct {
	vars [][2]string // value, {{name}}; longest value first
}

var dateRE = regexp.MustCompile(`\d{4}\.\d{2}\.\d{2}`)

func newNormalizer(vars map[string]string) normalizer {
	var n normalizer
	for k, v := range vars {
		if len(v) >= 4 {
			n.vars = append(n.vars, [2]string{v, "{{" + k + "}}"})
		}
	}
	sort.Slice(n.vars, func(i, j int) bool { return len(n.vars[i][0]) > len(n.vars[j][0]) })
	return n
}

func (n normalizer) str(s string) string {
	for _, v := range n.vars {
		s = strings.ReplaceAll(s, v[0], v[1])
	}
	return dateRE.ReplaceAllString(s, "<date>")
}

// value returns v with every string and key normalized.
func (n normalizer) value(v any) any {
	switch t := v.(type) {
	case string:
		return n.str(t)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[n.str(k)] = n.value(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = n.value(e)
		}
		return out
	}
	return v
}

type comparer struct {
	same, loose, subset, ignore pattern
	wantN, gotN                 normalizer
	diffs                       []string
}

func (c *comparer) add(path []string, format string, args ...any) {
	p := strings.Join(path, "/")
	if p == "" {
		p = "(root)"
	}
	c.diffs = append(c.diffs, p+": "+fmt.Sprintf(format, args...))
}

// kind is a JSON value's type, integers and fractions told apart (a client
// decoding 0.0 into an integer fails).
func kind(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case string:
		return "string"
	case json.Number:
		if strings.ContainsAny(t.String(), ".eE") {
			return "fraction"
		}
		return "integer"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

func short(v any) string {
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// walk compares want and got at path; loose is set below a Loose path.
func (c *comparer) walk(path []string, want, got any, loose bool) {
	if c.ignore.match(path) {
		return
	}
	if c.loose.match(path) {
		loose = true
	}
	if !loose && len(path) > 0 && c.same.match(path) {
		w, g := c.wantN.value(want), c.gotN.value(got)
		if !reflect.DeepEqual(w, g) {
			c.add(path, "the engine has %s, the emulator %s", short(w), short(g))
		}
		return
	}
	if kw, kg := kind(want), kind(got); kw != kg {
		c.add(path, "the engine has a %s (%s), the emulator a %s (%s)", kw, short(want), kg, short(got))
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g := got.(map[string]any)
		wk, gk := c.keys(w, c.wantN), c.keys(g, c.gotN)
		subset := c.subset.match(path)
		var missing, extra []string
		for k := range wk {
			if _, ok := gk[k]; !ok && !subset && !c.ignore.match(child(path, k)) {
				missing = append(missing, k)
			}
		}
		for k := range gk {
			if _, ok := wk[k]; !ok && !c.ignore.match(child(path, k)) {
				extra = append(extra, k)
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		if len(missing) > 0 {
			c.add(path, "the emulator lacks %s", strings.Join(missing, ", "))
		}
		if len(extra) > 0 {
			c.add(path, "the emulator has %s, which the engine does not", strings.Join(extra, ", "))
		}
		names := make([]string, 0, len(wk))
		for k := range wk {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if gv, ok := gk[k]; ok {
				c.walk(child(path, k), wk[k], gv, loose)
			}
		}
	case []any:
		g := got.([]any)
		if len(w) != len(g) {
			c.add(path, "the engine has %d elements, the emulator %d", len(w), len(g))
		}
		for i := 0; i < len(w) && i < len(g); i++ {
			c.walk(child(path, fmt.Sprint(i)), w[i], g[i], loose)
		}
	}
}

// keys maps normalized keys to values.
func (c *comparer) keys(m map[string]any, n normalizer) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[n.str(k)] = v
	}
	return out
}

// child is path/seg in a new slice.
func child(path []string, seg string) []string {
	return append(append(make([]string, 0, len(path)+1), path...), seg)
}
