package esemu

import (
	"net/http"
	"path"
	"strings"
)

// filterPath applies the include filters of filter_path to a response body,
// as Elasticsearch does: a comma list of dot paths, "*" in a segment a
// wildcard over one level of keys, "**" any number of levels, arrays
// traversed transparently; what no filter reaches is left out, objects and
// arrays left empty too ({} when nothing matches). Exclusion filters
// ("-path") are not modeled.
func filterPath(body any, filters string) (any, *esError) {
	var paths [][]string
	for _, f := range strings.Split(filters, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if strings.HasPrefix(f, "-") {
			return nil, errNotModeled("exclusion filter_path [%s]", f)
		}
		paths = append(paths, strings.Split(f, "."))
	}
	if len(paths) == 0 {
		return body, nil
	}
	raw, err := marshalJSON(body)
	if err != nil {
		return nil, newError(http.StatusInternalServerError, "esemu_exception", "encode response: %v", err)
	}
	var v any
	if err := decodeJSON(raw, &v); err != nil {
		return nil, newError(http.StatusInternalServerError, "esemu_exception", "decode response: %v", err)
	}
	out, ok := filterValue(v, paths)
	if !ok {
		return map[string]any{}, nil
	}
	return out, nil
}

// filterValue keeps what of v the paths (relative to v) reach.
func filterValue(v any, paths [][]string) (any, bool) {
	for _, p := range paths {
		if len(p) == 0 || (len(p) == 1 && p[0] == "**") {
			return v, true
		}
	}
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			var sub [][]string
			for _, p := range paths {
				if p[0] == "**" {
					sub = append(sub, p) // ** takes this level and goes on
					if segmentMatch(p[1], k) {
						sub = append(sub, p[2:]) // ** took no level
					}
					continue
				}
				if segmentMatch(p[0], k) {
					sub = append(sub, p[1:])
				}
			}
			if len(sub) == 0 {
				continue
			}
			if fv, ok := filterValue(val, sub); ok {
				out[k] = fv
			}
		}
		return out, len(out) > 0
	case []any:
		var out []any
		for _, el := range x {
			if fv, ok := filterValue(el, paths); ok {
				out = append(out, fv)
			}
		}
		return out, len(out) > 0
	default:
		return nil, false // a value where the paths go deeper
	}
}

func segmentMatch(pattern, key string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == key
	}
	ok, err := path.Match(strings.NewReplacer("[", "\\[", "?", "\\?", "\\", "\\\\").Replace(pattern), key)
	return err == nil && ok
}
