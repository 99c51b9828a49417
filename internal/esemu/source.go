package esemu

import (
	"encoding/json"
	"reflect"
	"strings"
)

// sourceFilter is the _source option of a search or get: off entirely, or
// kept with include and exclude path patterns (`*` wildcards, dotted paths).
type sourceFilter struct {
	disabled bool
	includes []string
	excludes []string
}

func (f sourceFilter) identity() bool {
	return !f.disabled && len(f.includes) == 0 && len(f.excludes) == 0
}

// parseSourceFilter reads a _source body value: bool, string, array of
// strings, or {includes, excludes}.
func parseSourceFilter(v any) (sourceFilter, *esError) {
	var f sourceFilter
	switch x := v.(type) {
	case nil:
	case bool:
		f.disabled = !x
	case string:
		f.includes = []string{x}
	case []any:
		for _, p := range x {
			s, ok := p.(string)
			if !ok {
				return f, errParsing("[_source] must be a boolean, a string, an array of strings or an object")
			}
			f.includes = append(f.includes, s)
		}
	case map[string]any:
		for k, val := range x {
			var list []string
			switch y := val.(type) {
			case string:
				list = []string{y}
			case []any:
				for _, p := range y {
					s, ok := p.(string)
					if !ok {
						return f, errParsing("Unknown key for a VALUE_NUMBER in [%s].", k)
					}
					list = append(list, s)
				}
			default:
				return f, errParsing("Unknown key for a %T in [%s].", val, k)
			}
			switch k {
			case "includes", "include":
				f.includes = append(f.includes, list...)
			case "excludes", "exclude":
				f.excludes = append(f.excludes, list...)
			default:
				return f, errParsing("Unknown key for a START_ARRAY in [%s].", k)
			}
		}
	default:
		return f, errParsing("[_source] must be a boolean, a string, an array of strings or an object")
	}
	return f, nil
}

// apply filters a document source. It returns nil when _source is disabled.
func (f sourceFilter) apply(src json.RawMessage) json.RawMessage {
	if f.disabled {
		return nil
	}
	if f.identity() {
		return src
	}
	var m map[string]any
	if err := decodeJSON(src, &m); err != nil {
		return src
	}
	out := f.filterMap(m, "")
	b, _ := marshalJSON(out)
	return b
}

func (f sourceFilter) filterMap(m map[string]any, prefix string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		path := prefix + k
		if matchesAny(f.excludes, path) {
			continue
		}
		full := len(f.includes) == 0 || matchesAny(f.includes, path)
		switch x := v.(type) {
		case map[string]any:
			if full || f.mayIncludeBelow(path) {
				sub := f.filterMapWithParent(x, path+".", full)
				if full || len(sub) > 0 {
					out[k] = sub
				}
			}
		case []any:
			if full {
				out[k] = f.filterArray(x, path, true)
			} else if f.mayIncludeBelow(path) {
				if arr := f.filterArray(x, path, false); len(arr) > 0 {
					out[k] = arr
				}
			}
		default:
			if full {
				out[k] = v
			}
		}
	}
	return out
}

// filterMapWithParent filters a sub-object; when its parent matched an
// include fully, only excludes apply below it.
func (f sourceFilter) filterMapWithParent(m map[string]any, prefix string, parentFull bool) map[string]any {
	if !parentFull {
		return f.filterMap(m, prefix)
	}
	g := sourceFilter{excludes: f.excludes}
	return g.filterMap(m, prefix)
}

func (f sourceFilter) filterArray(a []any, path string, full bool) []any {
	var out []any
	for _, v := range a {
		if m, ok := v.(map[string]any); ok {
			sub := f.filterMapWithParent(m, path+".", full)
			if full || len(sub) > 0 {
				out = append(out, sub)
			}
			continue
		}
		if full {
			out = append(out, v)
		}
	}
	return out
}

func (f sourceFilter) mayIncludeBelow(path string) bool {
	for _, p := range f.includes {
		if globPrefix(p, path+".") {
			return true
		}
	}
	return false
}

func matchesAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if globMatch(p, s) {
			return true
		}
	}
	return false
}

// globMatch reports whether s matches p, where `*` matches any run of
// characters (dots included), as ES's simple wildcard matching.
func globMatch(p, s string) bool {
	if !strings.Contains(p, "*") {
		return p == s
	}
	parts := strings.Split(p, "*")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i := 1; i < len(parts)-1; i++ {
		j := strings.Index(s, parts[i])
		if j < 0 {
			return false
		}
		s = s[j+len(parts[i]):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

// globPrefix reports whether some string matching p starts with prefix.
func globPrefix(p, prefix string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '*' {
			return true
		}
		if i >= len(prefix) {
			return true
		}
		if p[i] != prefix[i] {
			return false
		}
	}
	return len(p) >= len(prefix)
}

// deepMerge merges patch into base as the _update API merges a partial doc:
// objects merge recursively, everything else replaces.
func deepMerge(base, patch map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(patch))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range patch {
		if pm, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = deepMerge(bm, pm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if decodeJSON(a, &x) != nil || decodeJSON(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
