package redisx

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestEvent_MarshalJSON_SeedLine(t *testing.T) {
	tests := []struct {
		name string
		e    Event
		want string
	}{
		{
			name: "upsert as in the seed",
			e: Event{Op: OpUpsert, Index: "escf-cli", IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 1, ID: "1",
				SeqNo: 2, PrimaryTerm: 1, Version: 2, Source: json.RawMessage(`{"title": "edited"}`)},
			want: `{"op":"upsert","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"1","seq_no":2,"primary_term":1,"version":2,"source":{"title":"edited"}}`,
		},
		{
			name: "seq_no 0 is kept",
			e:    Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 0, ID: "a", SeqNo: 0, PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{}`)},
			want: `{"op":"upsert","index":"i","index_uuid":"u","shard":0,"id":"a","seq_no":0,"primary_term":1,"version":1,"source":{}}`,
		},
		{
			name: "routing and target",
			e: Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 2, ID: "a", Routing: "r1", SeqNo: 5, PrimaryTerm: 2, Version: 3,
				Source: json.RawMessage(`{"x":1}`), Target: "logs-*"},
			want: `{"op":"upsert","index":"i","index_uuid":"u","shard":2,"id":"a","routing":"r1","seq_no":5,"primary_term":2,"version":3,"source":{"x":1},"target":"logs-*"}`,
		},
		{
			name: "snapshot_end carries counts",
			e:    Event{Op: OpSnapshotEnd, Target: "orders,app-*", Counts: map[string]int64{"orders": 3, "app-1": 0}},
			want: `{"op":"snapshot_end","target":"orders,app-*","counts":{"app-1":0,"orders":3}}`,
		},
		{
			name: "index_deleted has no document fields",
			e:    Event{Op: OpIndexDeleted, Index: "escf-cli", IndexUUID: "U", Target: "escf-*"},
			want: `{"op":"index_deleted","index":"escf-cli","index_uuid":"U","target":"escf-*"}`,
		},
		{
			name: "target equal to the index is left out",
			e:    Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 0, ID: "a", SeqNo: 1, PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{}`), Target: "i"},
			want: `{"op":"upsert","index":"i","index_uuid":"u","shard":0,"id":"a","seq_no":1,"primary_term":1,"version":1,"source":{}}`,
		},
		{
			name: "delete carries its ordering stamp, no source",
			e:    Event{Op: OpDelete, Index: "escf-cli", IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 1, ID: "2", SeqNo: 7},
			want: `{"op":"delete","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"2","seq_no":7}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.e)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			var back Event
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			again, _ := json.Marshal(back)
			if string(again) != tt.want {
				t.Errorf("round trip: got %s, want %s", again, tt.want)
			}
		})
	}
}

func valuesMap(vals []any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(vals); i += 2 {
		m[vals[i].(string)] = vals[i+1]
	}
	return m
}

func TestEvent_ValuesParseRoundTrip(t *testing.T) {
	in := Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 3, ID: "d", Routing: "r", SeqNo: 0, PrimaryTerm: 4,
		Version: 9, Source: json.RawMessage(`{"a":[1,2]}`), Target: "t"}
	vals := in.Values()
	wantKeys := []string{"op", "index", "index_uuid", "shard", "id", "routing", "seq_no", "primary_term", "version", "source", "target"}
	if len(vals) != 2*len(wantKeys) {
		t.Fatalf("Values has %d items, want %d", len(vals), 2*len(wantKeys))
	}
	for i, k := range wantKeys {
		if vals[2*i] != k {
			t.Errorf("field %d = %v, want %s", i, vals[2*i], k)
		}
	}
	got, err := ParseEvent(redis.XMessage{ID: "1-0", Values: valuesMap(vals)})
	if err != nil {
		t.Fatal(err)
	}
	in.StreamID = "1-0"
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(in)
	if string(a) != string(b) || got.StreamID != "1-0" {
		t.Errorf("round trip: got %s, want %s", a, b)
	}
}

func TestParseEvent_Errors(t *testing.T) {
	base := func() map[string]any {
		return valuesMap(Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 1, ID: "d", SeqNo: 1, PrimaryTerm: 1,
			Version: 1, Source: json.RawMessage(`{}`)}.Values())
	}
	tests := []struct {
		name   string
		mutate func(m map[string]any)
	}{
		{"missing op", func(m map[string]any) { delete(m, "op") }},
		{"unknown op", func(m map[string]any) { m["op"] = "frobnicate" }},
		{"missing id", func(m map[string]any) { delete(m, "id") }},
		{"shard not a number", func(m map[string]any) { m["shard"] = "one" }},
		{"seq_no not a number", func(m map[string]any) { m["seq_no"] = "1.5" }},
		{"upsert without source", func(m map[string]any) { delete(m, "source") }},
		{"source not JSON", func(m map[string]any) { m["source"] = "{nope" }},
		{"field not a string", func(m map[string]any) { m["index"] = 7 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.mutate(m)
			_, err := ParseEvent(redis.XMessage{ID: "5-1", Values: m})
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("err = %v, want ErrBadEntry", err)
			}
		})
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add("upsert", "i", "u", "0", "d", "0", "1", "1", `{"a":1}`)
	f.Add("delete", "i", "u", "3", "d", "9", "", "", "")
	f.Add("snapshot_start", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, op, index, uuid, shard, id, seq, term, version, source string) {
		m := map[string]any{"op": op, "index": index, "index_uuid": uuid, "shard": shard, "id": id,
			"seq_no": seq, "primary_term": term, "version": version, "source": source}
		e, err := ParseEvent(redis.XMessage{ID: "1-1", Values: m})
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("error does not wrap ErrBadEntry: %v", err)
			}
			return
		}
		// Whatever parses must survive encode → parse unchanged.
		again, err := ParseEvent(redis.XMessage{ID: "1-1", Values: valuesMap(e.Values())})
		if err != nil {
			t.Fatalf("re-parse of %+v: %v", e, err)
		}
		a, errA := json.Marshal(e)
		b, errB := json.Marshal(again)
		if (errA == nil) != (errB == nil) || string(a) != string(b) {
			t.Fatalf("round trip changed the event: %s vs %s", a, b)
		}
	})
}

func TestEvent_XAddArgs(t *testing.T) {
	for _, e := range []Event{
		{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 3, ID: "d", Routing: "r", SeqNo: 0, PrimaryTerm: 4, Version: 9, Source: json.RawMessage(`{"a":"é"}`), Target: "t"},
		{Op: OpDelete, Index: "i", IndexUUID: "u", Shard: 1, ID: "d", SeqNo: 5},
		{Op: OpSnapshotEnd, Counts: map[string]int64{"i": 2}},
	} {
		got := e.XAddArgs("s")
		want := append([]any{"xadd", "s", "*"}, e.Values()...)
		if len(got) != len(want) {
			t.Fatalf("%s: %d args, want %d", e.Op, len(got), len(want))
		}
		for i := range want {
			g := got[i]
			if b, ok := g.([]byte); ok {
				g = string(b)
			}
			if g != want[i] {
				t.Errorf("%s: arg %d = %q, want %q", e.Op, i, got[i], want[i])
			}
		}
	}
}
