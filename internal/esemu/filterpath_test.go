package esemu

import (
	"encoding/json"
	"testing"
)

func TestFilterPath(t *testing.T) {
	body := obj("_shards", obj("total", 2, "failed", 0),
		"indices", obj("a", obj("uuid", "U", "primaries", obj("docs", 1),
			"shards", obj("0", []any{obj("routing", obj("primary", true, "node", "n1"), "docs", obj("count", 3)),
				obj("routing", obj("primary", false, "node", "n2"), "docs", obj("count", 3))}))))
	for _, tc := range []struct{ filter, want string }{
		{"_shards,indices.*.uuid,indices.*.shards.*.routing.primary",
			`{"_shards":{"failed":0,"total":2},"indices":{"a":{"shards":{"0":[{"routing":{"primary":true}},{"routing":{"primary":false}}]},"uuid":"U"}}}`},
		{"**.node", `{"indices":{"a":{"shards":{"0":[{"routing":{"node":"n1"}},{"routing":{"node":"n2"}}]}}}}`},
		{"ind*.a.prim*", `{"indices":{"a":{"primaries":{"docs":1}}}}`},
		{"nothing.here", `{}`},
	} {
		got, e := filterPath(body, tc.filter)
		if e != nil {
			t.Fatalf("%s: %v", tc.filter, e.reason)
		}
		b, _ := json.Marshal(got)
		if string(b) != tc.want {
			t.Errorf("filter_path=%s:\n got %s\nwant %s", tc.filter, b, tc.want)
		}
	}
	if _, e := filterPath(body, "-_shards"); e == nil {
		t.Error("an exclusion filter was accepted; want not modeled")
	}
}
