package redisx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/tests/redistest"
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

// TestEvent_XAddArgs writes events with XAddArgs and AppendXAddArgs to a
// real redis-server and reads the entries back in order: the fields and
// bytes must be the contract's, the same as Values.
func TestEvent_XAddArgs(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	tests := []struct {
		name string
		e    Event
		want []string
	}{
		{
			name: "upsert with routing and target",
			e: Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 3, ID: "d", Routing: "r", SeqNo: 0, PrimaryTerm: 4, Version: 9,
				Source: json.RawMessage(`{"a":"é"}`), Target: "t"},
			want: []string{"op", "upsert", "index", "i", "index_uuid", "u", "shard", "3", "id", "d", "routing", "r",
				"seq_no", "0", "primary_term", "4", "version", "9", "source", `{"a":"é"}`, "target", "t"},
		},
		{
			name: "extreme numbers, bytes that are not text",
			e: Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: -1, ID: "a\x00b\r\n", SeqNo: -9223372036854775808,
				PrimaryTerm: 9223372036854775807, Version: 1, Source: json.RawMessage("not json \xff")},
			want: []string{"op", "upsert", "index", "i", "index_uuid", "u", "shard", "-1", "id", "a\x00b\r\n",
				"seq_no", "-9223372036854775808", "primary_term", "9223372036854775807", "version", "1", "source", "not json \xff"},
		},
		{
			name: "upsert without a source",
			e:    Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 0, ID: "d", SeqNo: 1},
			want: []string{"op", "upsert", "index", "i", "index_uuid", "u", "shard", "0", "id", "d",
				"seq_no", "1", "primary_term", "0", "version", "0", "source", ""},
		},
		{
			name: "delete",
			e:    Event{Op: OpDelete, Index: "i", IndexUUID: "u", Shard: 1, ID: "d", SeqNo: 5},
			want: []string{"op", "delete", "index", "i", "index_uuid", "u", "shard", "1", "id", "d",
				"seq_no", "5", "primary_term", "0", "version", "0"},
		},
		{
			name: "snapshot end",
			e:    Event{Op: OpSnapshotEnd, Counts: map[string]int64{"i": 2}, Target: "i*"},
			want: []string{"op", "snapshot_end", "index", "", "index_uuid", "", "target", "i*", "counts", `{"i":2}`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.Values(); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("Values = %q\nwant %q", got, tt.want)
			}
			stream := "s:" + tt.name
			e := tt.e
			if err := rdb.Do(ctx, e.XAddArgs(stream)...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Do(ctx, e.AppendXAddArgs(nil, &stream)...).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: e.Values()}).Err(); err != nil {
				t.Fatal(err)
			}
			raw, err := rdb.Do(ctx, "XRANGE", stream, "-", "+").Slice()
			if err != nil || len(raw) != 3 {
				t.Fatalf("XRANGE: %d entries, %v", len(raw), err)
			}
			for i, entry := range raw {
				got := fmt.Sprintf("%q", entry.([]any)[1])
				if want := fmt.Sprintf("%q", tt.want); got != want {
					t.Errorf("entry %d (XAddArgs, AppendXAddArgs, Values) holds\n%s\nwant %s", i, got, want)
				}
			}
		})
	}
}

// TestEvent_AppendXAddArgs_NoAllocation: the commit builds each event's
// arguments in a reused buffer without allocating.
func TestEvent_AppendXAddArgs_NoAllocation(t *testing.T) {
	e := Event{Op: OpUpsert, Index: "i", IndexUUID: "u", Shard: 3, ID: "d", Routing: "r", SeqNo: 1000, PrimaryTerm: 4, Version: 900,
		Source: json.RawMessage(`{"a":1}`), Target: "t"}
	stream := "s"
	buf := make([]any, 0, 27)
	if n := testing.AllocsPerRun(100, func() { buf = e.AppendXAddArgs(buf[:0], &stream) }); n != 0 {
		t.Errorf("AppendXAddArgs: %v allocations, want 0", n)
	}
}
