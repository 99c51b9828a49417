package sink_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// pgBenchDocs is how many documents one pass writes.
const pgBenchDocs = 20000

// pgBenchSource is a ~110-byte source, as the relay's benchmarks use.
func pgBenchSource(i int, pass int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"title":"document %d","pass":%d,"price":%d.5,"tags":["a","b"],"note":"%s"}`,
		i, pass, i%1000, strings.Repeat("x", 30)))
}

// BenchmarkPostgres: the sink's handler, called from `lanes` goroutines
// as a consumer's lanes call it (one event in flight per lane, so the
// group commit's batches hold up to `lanes` events), against the loop a
// hand-written at-least-once consumer would run on the same server in the
// same run: per batch of 500 or 1,000 events, one transaction with one
// multi-row INSERT … ON CONFLICT (id, routing) DO UPDATE … WHERE the row's
// seq_no is lower. Each iteration writes pgBenchDocs documents: the first
// inserts them, the next ones update them (higher seq_no). Reports
// events/s. The sink's handler is called as a pool calls it (a context
// naming the stream and group), so each transaction also records what it
// applied (escf__applied_slots); "record" compares that with passes whose
// context names none (nothing recorded).
//
//	go test -run '^$' -bench BenchmarkPostgres -benchtime 3x ./sink/
func BenchmarkPostgres(b *testing.B) {
	rig := newPgRig(b)
	for _, batch := range []int{500, 1000} {
		b.Run(fmt.Sprintf("loop/batch=%d", batch), func(b *testing.B) { pgBenchLoop(b, rig, batch) })
	}
	for _, lanes := range []int{8, 64, 256, 1000, 2000} {
		b.Run(fmt.Sprintf("sink/lanes=%d", lanes), func(b *testing.B) {
			s, h := pgBenchSink(b, rig)
			b.ResetTimer()
			start := time.Now()
			for pass := range b.N {
				pgBenchSinkPass(b, h, lanes, pass)
			}
			b.ReportMetric(float64(b.N*pgBenchDocs)/time.Since(start).Seconds(), "events/s")
			st := s.Stats()
			b.ReportMetric(float64(st.Events)/float64(st.Transactions), "events/tx")
		})
	}
	// interleaved: a pass of the loop (batch 500), then one of the sink
	// (1,000 lanes: about 500 events per transaction), alternately, so
	// that both see the same load of a shared machine; reports the median
	// of the per-pair ratios.
	b.Run("interleaved", func(b *testing.B) {
		loop := pgBenchLoopTable(b, rig)
		_, h := pgBenchSink(b, rig)
		var ratios []float64
		var loopT, sinkT time.Duration
		b.ResetTimer()
		for pass := range b.N {
			t0 := time.Now()
			pgBenchLoopPass(b, rig, loop, 500, pass)
			t1 := time.Now()
			pgBenchSinkPass(b, h, 1000, pass)
			t2 := time.Now()
			loopT += t1.Sub(t0)
			sinkT += t2.Sub(t1)
			ratios = append(ratios, t1.Sub(t0).Seconds()/t2.Sub(t1).Seconds())
		}
		slices.Sort(ratios)
		b.ReportMetric(float64(b.N*pgBenchDocs)/loopT.Seconds(), "loop-events/s")
		b.ReportMetric(float64(b.N*pgBenchDocs)/sinkT.Seconds(), "sink-events/s")
		b.ReportMetric(ratios[len(ratios)/2], "sink/loop")
	})
	// record: a pass of a sink whose handler's context names no stream
	// (no record statement) and one of a sink recording, in pairs (which
	// goes first alternates); the median of the per-pair ratios.
	for _, lanes := range []int{8, 1000} {
		b.Run(fmt.Sprintf("record/lanes=%d", lanes), func(b *testing.B) {
			_, bare := pgBenchSink(b, rig)
			_, recording := pgBenchSink(b, rig)
			var ratios []float64
			b.ResetTimer()
			for pass := range b.N {
				timed := func(run func()) float64 { t0 := time.Now(); run(); return time.Since(t0).Seconds() }
				runBare := func() { pgBenchSinkPassCtx(b, context.Background(), bare, lanes, pass) }
				runRecording := func() { pgBenchSinkPass(b, recording, lanes, pass) }
				var tb, tr float64
				if pass%2 == 0 {
					tb, tr = timed(runBare), timed(runRecording)
				} else {
					tr, tb = timed(runRecording), timed(runBare)
				}
				ratios = append(ratios, tb/tr)
			}
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "recording/bare")
		})
	}
}

// pgBenchDelivery is the context a pool gives the sink's handler.
var pgBenchDelivery = redisx.WithDelivery(context.Background(), redisx.Delivery{Stream: "escf:{bench}:events", Group: "g"})

// pgBenchSink is a sink on a fresh schema, its table created.
func pgBenchSink(b *testing.B, rig *pgRig) (*sink.Postgres, redisx.Handler) {
	schema, keys := rig.schema(b, "u1")
	s := rig.sink(b, sink.PostgresConfig{Schema: schema, Keys: keys})
	h := s.Handler()
	pgHandle(b, h, pgEvent(redisx.OpUpsert, "u1", "warm-up", "", 0)) // creates the table
	return s, h
}

// pgBenchSinkPass writes pgBenchDocs documents through h from lanes
// goroutines, one event in flight each, as a pool's lanes call it.
func pgBenchSinkPass(b *testing.B, h redisx.Handler, lanes, pass int) {
	pgBenchSinkPassCtx(b, pgBenchDelivery, h, lanes, pass)
}

// pgBenchSinkPassCtx is pgBenchSinkPass with the handler's context.
func pgBenchSinkPassCtx(b *testing.B, ctx context.Context, h redisx.Handler, lanes, pass int) {
	var wg sync.WaitGroup
	errs := make(chan error, lanes)
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := l; i < pgBenchDocs; i += lanes {
				seq := int64(pass*pgBenchDocs + i)
				e := redisx.Event{StreamID: fmt.Sprintf("%d-0", seq+1), Op: redisx.OpUpsert, Index: "orders", IndexUUID: "u1",
					Shard: i % 3, ID: fmt.Sprintf("d%d", i), SeqNo: seq, PrimaryTerm: 1, Version: seq + 1, Source: pgBenchSource(i, pass)}
				if err := h(ctx, e); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// pgBenchLoop is BenchmarkPostgres's hand-written loop, in transactions
// of batch rows.
func pgBenchLoop(b *testing.B, rig *pgRig, batch int) {
	q := pgBenchLoopTable(b, rig)
	b.ResetTimer()
	start := time.Now()
	for pass := range b.N {
		pgBenchLoopPass(b, rig, q, batch, pass)
	}
	b.ReportMetric(float64(b.N*pgBenchDocs)/time.Since(start).Seconds(), "events/s")
}

// pgBenchLoopTable creates the loop's table (the sink's columns and key)
// in a fresh schema and returns its quoted name.
func pgBenchLoopTable(b *testing.B, rig *pgRig) string {
	schema, _ := rig.schema(b, "u1")
	q := pgx.Identifier{schema, "escf_orders"}.Sanitize()
	if _, err := rig.direct.Exec(context.Background(), "CREATE TABLE "+q+" (id text NOT NULL, routing text NOT NULL DEFAULT '', source jsonb NOT NULL, "+
		"seq_no bigint NOT NULL, primary_term bigint NOT NULL, version bigint NOT NULL, index_uuid text NOT NULL, shard int NOT NULL, "+
		"updated_at timestamptz NOT NULL, PRIMARY KEY (id, routing))"); err != nil {
		b.Fatal(err)
	}
	return q
}

// pgBenchLoopPass writes pgBenchDocs documents into table q, batch rows
// per transaction: one multi-row INSERT … ON CONFLICT each.
func pgBenchLoopPass(b *testing.B, rig *pgRig, q string, batch, pass int) {
	ctx := context.Background()
	for lo := 0; lo < pgBenchDocs; lo += batch {
		var sb strings.Builder
		sb.WriteString("INSERT INTO " + q + " AS t (id, routing, source, seq_no, primary_term, version, index_uuid, shard, updated_at) VALUES ")
		args := make([]any, 0, 8*batch)
		for i := lo; i < lo+batch; i++ {
			if i > lo {
				sb.WriteByte(',')
			}
			n := len(args)
			fmt.Fprintf(&sb, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, now())", n+1, n+2, n+3, n+4, n+5, n+6, n+7, n+8)
			seq := int64(pass*pgBenchDocs + i)
			args = append(args, fmt.Sprintf("d%d", i), "", string(pgBenchSource(i, pass)), seq, int64(1), seq+1, "u1", int32(i%3))
		}
		sb.WriteString(" ON CONFLICT (id, routing) DO UPDATE SET source = EXCLUDED.source, seq_no = EXCLUDED.seq_no, " +
			"primary_term = EXCLUDED.primary_term, version = EXCLUDED.version, index_uuid = EXCLUDED.index_uuid, shard = EXCLUDED.shard, " +
			"updated_at = EXCLUDED.updated_at WHERE t.seq_no < EXCLUDED.seq_no")
		err := pgx.BeginFunc(ctx, rig.direct, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sb.String(), args...)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
