package redisx

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// layoutRegexp matches the names a KeySpec pattern stands for: each <…>
// is one part without ':' (test values have none).
func layoutRegexp(pattern string) *regexp.Regexp {
	q := regexp.QuoteMeta(pattern)
	q = regexp.MustCompile(`<[a-z_]+>`).ReplaceAllString(q, `[^:]+`)
	return regexp.MustCompile("^" + q + "$")
}

// TestLayout_Constructors: every key a constructor of keys.go builds (with
// what idempotency appends to a prefix) is of exactly one kind in Layout,
// every kind in Layout is built by a constructor, and every Keys method
// that names a key is listed here.
func TestLayout_Constructors(t *testing.T) {
	for _, keys := range []struct {
		name string
		k    Keys
		tag  string
	}{
		{name: "feed", k: NewKeys("feed"), tag: "{feed}"},
		{name: "partition", k: PartitionKeys("feed", 2, 4), tag: "{feed:2}"},
	} {
		t.Run(keys.name, func(t *testing.T) {
			k := keys.k
			built := []struct {
				method string // the Keys method, "" for a function
				key    string
			}{
				{"Events", k.Events()},
				{"Checkpoints", k.Checkpoints()},
				{"Indices", k.Indices()},
				{"DeliveredRange", k.DeliveredRange("U", 3, 7)},
				{"DeliveredRangePrefix", k.DeliveredRangePrefix("U", 3) + "7"},
				{"DeliveredCounts", k.DeliveredCounts("U", 3)},
				{"Delivered", k.Delivered("U", 3)},
				{"Routing", k.Routing("U", 3)},
				{"Scan", k.Scan("U", 3)},
				{"Tokens", k.Tokens()},
				{"Meta", k.Meta()},
				{"Applied", k.Applied()},
				{"Lease", k.Lease()},
				{"Generations", k.Generations()},
				{"Dead", k.Dead()},
				{"Lost", k.Lost()},
				{"Relays", k.Relays()},
				{"", HoldGroup("g")},
				{"Fence", k.Fence("n") + ":U"}, // idempotency.Fence's hash of an index
				{"Fence", k.Fence("n")},
				{"BulkTombstones", k.BulkTombstones() + ":U:5"}, // idempotency.Tombstones's bucket
				{"", CacheFenceKey("n") + ":U"},
				{"", CacheClusterFencePrefix("n") + ":{t}:U"},
				{"", CacheFenceKey("n")},
				{"", CachePositionsKey("n")},
			}
			specs := Layout()
			used := make([]bool, len(specs))
			listed := map[string]bool{}
			for _, b := range built {
				listed[b.method] = true
				key := strings.Replace(b.key, keys.tag, "{feed}", 1) // a partition's tag stands for {feed} too
				var matched []string
				for i, s := range specs {
					if layoutRegexp(s.Pattern).MatchString(key) {
						matched = append(matched, s.Pattern)
						used[i] = true
					}
				}
				if len(matched) != 1 {
					t.Errorf("%s (%s) is of %d kinds in Layout %v, want one", b.key, b.method, len(matched), matched)
				}
			}
			for i, s := range specs {
				if !used[i] {
					t.Errorf("Layout lists %s, which no constructor builds", s.Pattern)
				}
			}
			kt := reflect.TypeFor[Keys]()
			for i := range kt.NumMethod() {
				m := kt.Method(i)
				if m.Name == "Feed" || m.Name == "Pattern" || m.Type.NumOut() != 1 || m.Type.Out(0).Kind() != reflect.String {
					continue
				}
				if !listed[m.Name] {
					t.Errorf("Keys.%s names a key this test does not check against Layout: add it here, and its kind to Layout and the README's Keys table", m.Name)
				}
			}
		})
	}
}
