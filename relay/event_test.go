package relay

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

func TestUpsertEvent_CarriesTheHitsVersion(t *testing.T) {
	h := es.Hit{ID: "1", Routing: "r", SeqNo: 0, PrimaryTerm: 3, Version: 7, Source: json.RawMessage(`{"a":1}`)}
	e := upsertEvent("idx", "U", 2, "idx-*", h)
	want := redisx.Event{Op: redisx.OpUpsert, Index: "idx", IndexUUID: "U", Shard: 2, ID: "1", Routing: "r",
		SeqNo: 0, PrimaryTerm: 3, Version: 7, Source: h.Source, Target: "idx-*"}
	got, _ := json.Marshal(e)
	w, _ := json.Marshal(want)
	if string(got) != string(w) {
		t.Fatalf("got %s, want %s", got, w)
	}
}

// BenchmarkHitToEntry measures hit → stream entry per event: the event
// and its field list as strings (Values), and as the commit builds it
// (AppendXAddArgs into a reused buffer).
func BenchmarkHitToEntry(b *testing.B) {
	hits := make([]es.Hit, 1000)
	for i := range hits {
		hits[i] = es.Hit{ID: fmt.Sprintf("order-%08d", i), SeqNo: int64(i), PrimaryTerm: 1, Version: 1,
			Source: json.RawMessage(`{"customer":"customer-1","status":"shipped","amount":12.5,"tags":["a","b"]}`)}
	}
	b.Run("Values", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			h := hits[i%len(hits)]
			e := upsertEvent("orders", "BZfHMdwmRv-iskXKFEMGgA", 1, "orders", h)
			_ = redis.XAddArgs{Stream: "s", Values: e.Values()}
		}
	})
	b.Run("XAddArgs", func(b *testing.B) {
		events := make([]redisx.Event, len(hits))
		args := make([]any, 0, 27*len(hits))
		stream := "s"
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			j := i % len(hits)
			if j == 0 {
				args = args[:0]
			}
			events[j] = upsertEvent("orders", "BZfHMdwmRv-iskXKFEMGgA", 1, "orders", hits[j])
			args = events[j].AppendXAddArgs(args, &stream)
		}
	})
}
