package redisx

import "testing"

func TestFeedEvidence(t *testing.T) {
	f, p0, p1 := NewKeys("f"), PartitionKeys("f", 0, 2), PartitionKeys("f", 1, 2)
	tests := []struct {
		name                  string
		seen                  []feedKeysSeen
		evidence, emptyStream string
	}{
		{name: "nothing", seen: []feedKeysSeen{{keys: f}}},
		{name: "meta hash: a relay started", seen: []feedKeysSeen{{keys: f, meta: true}}, evidence: f.Meta()},
		{name: "stream that held entries, state lost", seen: []feedKeysSeen{{keys: f, stream: true, lastID: "1700000000000-0"}}, evidence: f.Events()},
		{name: "stream trimmed to nothing", seen: []feedKeysSeen{{keys: f, stream: true, lastID: "5-3"}}, evidence: f.Events()},
		{name: "lease only: a relay leads, before its first commit", seen: []feedKeysSeen{{keys: f, lease: true}}, evidence: f.Lease()},
		{name: "stream a consumer group created", seen: []feedKeysSeen{{keys: f, stream: true, lastID: "0-0"}}, emptyStream: f.Events()},
		{name: "meta beside an empty stream", seen: []feedKeysSeen{{keys: f, meta: true, stream: true, lastID: "0-0"}}, evidence: f.Meta()},
		{name: "partition 1 only", seen: []feedKeysSeen{{keys: f}, {keys: p0}, {keys: p1, meta: true}}, evidence: p1.Meta()},
		{name: "empty partition stream", seen: []feedKeysSeen{{keys: f}, {keys: p0, stream: true, lastID: "0-0"}, {keys: p1}}, emptyStream: p0.Events()},
		{name: "feed-level meta first", seen: []feedKeysSeen{{keys: f, meta: true}, {keys: p0, lease: true}}, evidence: f.Meta()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evidence, empty := feedEvidence(tt.seen)
			if evidence != tt.evidence || empty != tt.emptyStream {
				t.Fatalf("feedEvidence = %q, %q; want %q, %q", evidence, empty, tt.evidence, tt.emptyStream)
			}
		})
	}
}

func TestFeedOfMeta(t *testing.T) {
	tests := []struct {
		key, feed string
		ok        bool
	}{
		{"escf:{orders}:meta", "orders", true},
		{"escf:{orders:3}:meta", "orders", true},
		{"escf:{orders:0}:meta", "orders", true},
		{"escf:{orders:x}:meta", "", false},
		{"escf:{orders:03}:meta", "", false},
		{"escf:{orders:-1}:meta", "", false},
		{"escf:{a}:b}:meta", "", false},
		{"escf:{}:meta", "", false},
		{"escf:{orders}:events", "", false},
		{"other:{orders}:meta", "", false},
	}
	for _, tt := range tests {
		feed, ok := feedOfMeta(tt.key)
		if feed != tt.feed || ok != tt.ok {
			t.Errorf("feedOfMeta(%q) = %q, %v; want %q, %v", tt.key, feed, ok, tt.feed, tt.ok)
		}
	}
}
