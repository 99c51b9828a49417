package es

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// refParseSearch is parseSearch by encoding/json: exact keys through
// maps (the last of a repeated key wins), null as an absent field.
func refParseSearch(data []byte) (searchResponse, error) {
	var r searchResponse
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return r, err
	}
	if v, ok := top["timed_out"]; ok {
		if err := json.Unmarshal(v, &r.TimedOut); err != nil {
			return r, err
		}
	}
	if v, ok := top["_shards"]; ok {
		if err := json.Unmarshal(v, &r.Shards); err != nil {
			return r, err
		}
	}
	var hits map[string]json.RawMessage
	if err := json.Unmarshal(top["hits"], &hits); err != nil && top["hits"] != nil {
		return r, err
	}
	var list []map[string]json.RawMessage
	if v := hits["hits"]; v != nil {
		if err := json.Unmarshal(v, &list); err != nil {
			return r, err
		}
	}
	for _, m := range list {
		for key, v := range m {
			// Folded keys and a null string amid repeated keys depend on
			// the order of the keys, which a map loses: the relay's
			// FuzzHitToEvent checks those against a decoder of tokens.
			if strings.ToLower(key) != key || string(v) == "null" && key != "_source" {
				return r, errSkip
			}
		}
		var h rawHit
		var seq, term, version *int64
		for key, dst := range map[string]any{"_index": &h.Index, "_id": &h.ID, "_routing": &h.Routing,
			"_seq_no": &seq, "_primary_term": &term, "_version": &version} {
			if v, ok := m[key]; ok {
				if err := json.Unmarshal(v, dst); err != nil {
					return r, err
				}
			}
		}
		for _, n := range []struct {
			src *int64
			dst *optInt
		}{{seq, &h.SeqNo}, {term, &h.PrimaryTerm}, {version, &h.Version}} {
			if n.src != nil {
				*n.dst = optInt{N: *n.src, Set: true}
			}
		}
		if v := m["_source"]; v != nil && string(v) != "null" {
			h.Source = v
		}
		r.Hits = append(r.Hits, h)
	}
	return r, nil
}

var errSkip = errors.New("not comparable")

// checkParseSearch fails when parseSearch and encoding/json disagree.
func checkParseSearch(t *testing.T, data []byte) {
	t.Helper()
	want, werr := refParseSearch(data)
	if werr == errSkip {
		return
	}
	got, gerr := parseSearch(data, nil)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%q: error %v, encoding/json: %v", data, gerr, werr)
	}
	if werr != nil {
		return
	}
	if len(got.Hits) == 0 {
		got.Hits = nil
	}
	for i := range got.Hits {
		// encoding/json's RawMessage holds the value without the
		// whitespace around it, as parseSearch's sub-slice does.
		if !bytes.Equal(got.Hits[i].Source, want.Hits[i].Source) {
			t.Fatalf("%q: hit %d source %q, encoding/json %q", data, i, got.Hits[i].Source, want.Hits[i].Source)
		}
		got.Hits[i].Source, want.Hits[i].Source = nil, nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", data, got, want)
	}
}

var searchSeeds = []string{
	`{"took":3,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},"hits":{"max_score":null,"hits":[` +
		`{"_index":"orders","_id":"d1","_version":3,"_seq_no":7,"_primary_term":1,"_score":null,"_source":{"n":1,"s":"x"},"sort":[7]},` +
		`{"_index":"orders","_id":"d\"2\\u00e9","_routing":"r1","_version":1,"_seq_no":9,"_primary_term":2,"_source":{"deep":[1,2.5e-3,{"a":null}],"t":true,"u":"\u00e9\ud83d\ude00"},"sort":[9]}]}}`,
	`{"timed_out":true,"_shards":{"total":1,"successful":0,"skipped":0,"failed":1,"failures":[{"shard":0,"index":"i","reason":{"type":"t","reason":"r"}}]},"hits":{"hits":[]}}`,
	`{"hits":{"hits":[{"_id":"é","_seq_no":9223372036854775807,"_primary_term":-0,"_version":1,"_source":  [ ]  }]}}`,
	`{"hits":{"hits":[{"_id":"x","_seq_no":9223372036854775808}]}}`,
	`{"hits":{"hits":[{"_id":"x","_seq_no":-9223372036854775808,"_primary_term":-1,"_version":999999999999999999}]}}`,
	`{"hits":{"hits":[{"_id":"x","_seq_no":-9223372036854775809,"_version":1000000000000000000}]}}`,
	`{"hits":{"hits":[{"_id":"x","_seq_no":-0,"_version":1e3,"_primary_term":0}]}}`,
	`{"hits":{"hits":[{"_id":"x","_seq_no":1.0}]}}`,
	`{"hits":{"hits":[{"_id":"x","_seq_no":"1"}]}}`,
	`{"hits":{"hits":[null,{"_id":null,"_source":null}]}}`,
	`{"hits":null}`, `null`, ` {} `, `{} x`, `{"a":[1,}`, `{"a":"\x"}`, `{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`,
	`{"_id":"a","_id":"b","hits":{"hits":[{"_id":"a","_id":"b"}]},"hits":{"total":1}}`,
	"{\"hits\":{\"hits\":[{\"_id\":\"a\xffb\",\"_source\":{\"k\":\"\xff\"}}]}}",
	"{\"a\":\"\t\"}",
}

func TestParseSearch_MatchesEncodingJSON(t *testing.T) {
	for _, s := range searchSeeds {
		checkParseSearch(t, []byte(s))
	}
}

func FuzzParseSearch(f *testing.F) {
	for _, s := range searchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkParseSearch(t, data) })
}

// BenchmarkParseSearch parses a page of 1,000 hits shaped like the
// benchmarks' (~110-byte sources), per hit.
func BenchmarkParseSearch(b *testing.B) {
	var page strings.Builder
	page.WriteString(`{"took":2,"timed_out":false,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0},"hits":{"max_score":null,"hits":[`)
	for i := range 1000 {
		if i > 0 {
			page.WriteByte(',')
		}
		fmt.Fprintf(&page, `{"_index":"bench-docs","_id":"d%d","_version":1,"_seq_no":%d,"_primary_term":1,"_score":null,`+
			`"_source":{"n":%d,"customer":"customer-%d","note":"a note of moderate length to make the source realistic"},"sort":[%d]}`,
			i, 40000+i, i, i%97, 40000+i)
	}
	page.WriteString(`]}}`)
	data := []byte(page.String())
	var hits []rawHit
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := parseSearch(data, hits)
		if err != nil || len(r.Hits) != 1000 {
			b.Fatal(err, len(r.Hits))
		}
		hits = r.Hits
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/hit")
}
