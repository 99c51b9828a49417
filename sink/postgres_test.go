package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/sink/sinktest"
	"github.com/es-changefeed/es-changefeed/tests/pgtest"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// pgRig is a PostgreSQL server and the feed's Redis for the sink's tests;
// each sink gets a schema of its own.
type pgRig struct {
	pg     *pgtest.Server
	rdb    *redis.Client
	direct *pgxpool.Pool // straight to the server, for reading back
	n      atomic.Int64
}

func newPgRig(tb testing.TB) *pgRig {
	tb.Helper()
	pg := pgtest.Start(tb)
	return &pgRig{pg: pg, rdb: redistest.Start(tb).Client(tb), direct: pg.Pool(tb, "postgres")}
}

// schema creates a fresh schema and a feed whose generations hash gives
// each of uuids the generation of its place (1, 2, …).
func (r *pgRig) schema(tb testing.TB, uuids ...string) (schema string, keys redisx.Keys) {
	tb.Helper()
	n := r.n.Add(1)
	schema = fmt.Sprintf("s%d", n)
	keys = redisx.NewKeys(fmt.Sprintf("pgfeed%d", n))
	ctx := context.Background()
	if _, err := r.direct.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatal(err)
	}
	for i, u := range uuids {
		if err := r.rdb.HSet(ctx, keys.Generations(), u, i+1).Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return schema, keys
}

// sink builds a sink on the rig's server (through pool when not nil),
// closed in tb.Cleanup.
func (r *pgRig) sink(tb testing.TB, cfg sink.PostgresConfig) *sink.Postgres {
	tb.Helper()
	if cfg.Pool == nil && cfg.URL == "" {
		cfg.Pool = r.direct
	}
	cfg.Redis = r.rdb
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := sink.NewPostgres(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// Bounded: a test that failed with PostgreSQL stopped leaves a
		// batch retrying; Close then cancels it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// row is what a document table holds of one document.
type pgRow struct {
	source     string
	seqNo      int64
	uuid       string
	found      bool
	term, vers int64
	shard      int
}

func (r *pgRig) row(tb testing.TB, schema, table, id, routing string) pgRow {
	tb.Helper()
	var got pgRow
	err := r.direct.QueryRow(context.Background(), "SELECT source::text, seq_no, index_uuid, primary_term, version, shard FROM "+
		pgx.Identifier{schema, table}.Sanitize()+" WHERE id = $1 AND routing = $2", id, routing).
		Scan(&got.source, &got.seqNo, &got.uuid, &got.term, &got.vers, &got.shard)
	if errors.Is(err, pgx.ErrNoRows) {
		return pgRow{}
	}
	if err != nil {
		tb.Fatal(err)
	}
	got.found = true
	return got
}

// TestPostgres_Contract runs the sinks' contract (sinktest) on the
// PostgreSQL sink, with a pool passed in that reaches the server through a
// proxy (the suite's hanging target), a schema per case.
func TestPostgres_Contract(t *testing.T) {
	rig := newPgRig(t)
	sinktest.Run(t, func(tb testing.TB) sinktest.Env {
		schema, keys := rig.schema(tb, sinktest.IndexUUID)
		proxy := sinktest.StartProxy(tb, rig.pg.Addr)
		passed, err := pgxpool.New(context.Background(), strings.Replace(rig.pg.URL("postgres"), rig.pg.Addr, proxy.Addr(), 1))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(passed.Close)
		open := func(tb testing.TB) sink.Sink {
			s, err := sink.NewPostgres(sink.PostgresConfig{Pool: passed, Schema: schema, Redis: rig.rdb, Keys: keys,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				tb.Fatal(err)
			}
			return s
		}
		holds := func(ctx context.Context, d sinktest.DocID) (json.RawMessage, bool, error) {
			var src string
			err := rig.direct.QueryRow(ctx, "SELECT source::text FROM "+pgx.Identifier{schema, "escf_" + d.Index}.Sanitize()+
				" WHERE id = $1 AND routing = ''", d.ID).Scan(&src)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return nil, false, nil
			case err != nil && strings.Contains(err.Error(), "does not exist"):
				return nil, false, nil // no table yet: nothing written
			case err != nil:
				return nil, false, err
			}
			return json.RawMessage(src), true, nil
		}
		clientsOpen := func(ctx context.Context) error {
			if err := passed.Ping(ctx); err != nil {
				return fmt.Errorf("the pool passed in: %w", err)
			}
			return rig.rdb.Ping(ctx).Err()
		}
		return sinktest.Env{Sink: open(tb), Holds: holds, Gate: &proxy.Gate, ClientsOpen: clientsOpen, Reopen: open}
	}, sinktest.Features{Ordered: true, Positions: true, Reconciler: true, ClientsPassedIn: true, CloseAborts: true})
}

// pgEvent is an event of index "orders" (uuid u) with a source naming its
// seq_no.
func pgEvent(op redisx.Op, uuid, id, routing string, seq int64) redisx.Event {
	e := redisx.Event{StreamID: fmt.Sprintf("%d-0", seq+1), Op: op, Index: "orders", IndexUUID: uuid, Shard: 1, ID: id, Routing: routing,
		SeqNo: seq, PrimaryTerm: 2, Version: seq + 1, Target: "orders"}
	if op == redisx.OpUpsert {
		e.Source = json.RawMessage(fmt.Sprintf(`{"id":%q,"seq":%d}`, id, seq))
	}
	return e
}

func pgHandle(tb testing.TB, h redisx.Handler, evs ...redisx.Event) {
	tb.Helper()
	for _, e := range evs {
		if err := h(context.Background(), e); err != nil {
			tb.Fatalf("handler(%s %s seq %d of %s): %v", e.Op, e.ID, e.SeqNo, e.IndexUUID, err)
		}
	}
}

func TestPostgresTableName(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		name, in, want string
	}{
		{"plain", "escf_orders", "escf_orders"},
		{"dashes and dots", "escf_logs-2024.01", "escf_logs_2024_01"},
		{"plus and hash", "a+b#c", "a_b_c"},
		{"letters keep their case and script", "escf_Товары", "escf_Товары"},
		{"63 bytes stay", long[:63], long[:63]},
		{"64 bytes get a hash", long[:64], long[:54] + "_" + "a6fdf6d8"},
		{"multibyte cut on a rune", strings.Repeat("é", 40), strings.Repeat("é", 27) + "_" + "5ac7fd6a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sink.PostgresTableName(tt.in)
			if len(got) > sink.PostgresMaxName {
				t.Fatalf("PostgresTableName(%q) = %q: %d bytes, over %d", tt.in, got, len(got), sink.PostgresMaxName)
			}
			if strings.HasSuffix(tt.want, "a6fdf6d8") || strings.HasSuffix(tt.want, "5ac7fd6a") {
				// The hash is the whole name's: check the shape, then that
				// two long names differing only past the cut differ.
				if got[:len(got)-8] != tt.want[:len(tt.want)-8] {
					t.Fatalf("PostgresTableName(%q) = %q, want %q + 8 hex digits", tt.in, got, tt.want[:len(tt.want)-8])
				}
				if other := sink.PostgresTableName(tt.in + "x"); other == got {
					t.Fatalf("%q and %q share the table %q", tt.in, tt.in+"x", got)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("PostgresTableName(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPostgresConfig_Validate(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	keys := redisx.NewKeys("f")
	url := "postgres://u:secret@127.0.0.1:1/app"
	tests := []struct {
		name    string
		cfg     sink.PostgresConfig
		wantErr string
	}{
		{name: "defaults", cfg: sink.PostgresConfig{URL: url, Redis: rdb, Keys: keys}},
		{name: "keyword value", cfg: sink.PostgresConfig{URL: "host=127.0.0.1 port=1 dbname=app", Redis: rdb, Keys: keys}},
		{name: "uuid template", cfg: sink.PostgresConfig{URL: url, Redis: rdb, Keys: keys, Table: "t_{index}_{index_uuid}"}},
		{name: "no URL", cfg: sink.PostgresConfig{Redis: rdb, Keys: keys}, wantErr: "set Pool or URL"},
		{name: "no Redis", cfg: sink.PostgresConfig{URL: url, Keys: keys}, wantErr: "Redis is nil"},
		{name: "no keys", cfg: sink.PostgresConfig{URL: url, Redis: rdb}, wantErr: "Keys is empty"},
		{name: "bad URL, password masked", cfg: sink.PostgresConfig{URL: "postgres://u:secret@h:notaport/db", Redis: rdb, Keys: keys}, wantErr: "postgres://u:xxxxx@h:notaport/db"},
		{name: "unknown placeholder", cfg: sink.PostgresConfig{URL: url, Redis: rdb, Keys: keys, Table: "t_{idx}"}, wantErr: `unknown placeholder {idx}`},
		{name: "bad index_deleted", cfg: sink.PostgresConfig{URL: url, Redis: rdb, Keys: keys, IndexDeleted: "truncate"}, wantErr: `IndexDeleted "truncate"`},
		{name: "negative keep", cfg: sink.PostgresConfig{URL: url, Redis: rdb, Keys: keys, TombstoneKeep: -time.Second}, wantErr: "TombstoneKeep = -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("err = %v: the password shows", err)
			}
		})
	}
}

// TestPostgres_Handler_Order: one row per (id, routing); an event applies
// only if it orders after what the row or the document's tombstone holds.
func TestPostgres_Handler_Order(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	h := s.Handler()
	type step struct {
		e       redisx.Event
		routing string
		want    int64 // seq_no of the row of (d, routing) afterwards; -1 none
	}
	steps := []step{
		{pgEvent(redisx.OpUpsert, "u1", "d", "", 5), "", 5},
		{pgEvent(redisx.OpUpsert, "u1", "d", "r1", 3), "r1", 3}, // another document: same _id, another routing
		{pgEvent(redisx.OpUpsert, "u1", "d", "", 4), "", 5},     // older
		{pgEvent(redisx.OpUpsert, "u1", "d", "", 5), "", 5},     // repeated
		{pgEvent(redisx.OpDelete, "u1", "d", "", 5), "", -1},    // a delete orders after the upsert of its seq_no
		{pgEvent(redisx.OpUpsert, "u1", "d", "", 5), "", -1},    // the tombstone refuses it
		{pgEvent(redisx.OpUpsert, "u1", "d", "", 6), "", 6},     // newer: written again
		{pgEvent(redisx.OpDelete, "u1", "d", "r1", 2), "r1", 3}, // older delete
		{pgEvent(redisx.OpDelete, "u1", "x", "", 9), "", -1},    // an id never seen
		{pgEvent(redisx.OpUpsert, "u1", "x", "", 8), "", -1},    // older than that delete
	}
	for i, st := range steps {
		pgHandle(t, h, st.e)
		got := rig.row(t, schema, "escf_orders", st.e.ID, st.routing)
		if (st.want < 0) != !got.found || (got.found && got.seqNo != st.want) {
			t.Fatalf("step %d (%s %s/%q seq %d): row %+v, want seq_no %d (-1: none)", i, st.e.Op, st.e.ID, st.e.Routing, st.e.SeqNo, got, st.want)
		}
	}
	got := rig.row(t, schema, "escf_orders", "d", "")
	if got.source != `{"id": "d", "seq": 6}` || got.uuid != "u1" || got.term != 2 || got.vers != 7 || got.shard != 1 {
		t.Fatalf("row of d: %+v, want the upsert of seq_no 6 with its primary_term, version, uuid and shard", got)
	}
}

// TestPostgres_Handler_RecreatedIndex: an index deleted and created again
// under the same name writes into the same table with a higher generation:
// its events win over the old index's whatever their seq_no, and the old
// index's late events lose.
func TestPostgres_Handler_RecreatedIndex(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "old", "new")
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	h := s.Handler()
	pgHandle(t, h, pgEvent(redisx.OpUpsert, "old", "a", "", 100), pgEvent(redisx.OpUpsert, "old", "b", "", 101))
	pgHandle(t, h, pgEvent(redisx.OpUpsert, "new", "a", "", 0), pgEvent(redisx.OpDelete, "new", "b", "", 0))
	pgHandle(t, h, pgEvent(redisx.OpUpsert, "old", "a", "", 200), pgEvent(redisx.OpUpsert, "old", "b", "", 200), pgEvent(redisx.OpDelete, "old", "a", "", 300))
	if got := rig.row(t, schema, "escf_orders", "a", ""); !got.found || got.uuid != "new" || got.seqNo != 0 {
		t.Fatalf("row a: %+v, want the new index's seq_no 0", got)
	}
	if got := rig.row(t, schema, "escf_orders", "b", ""); got.found {
		t.Fatalf("row b: %+v, want none (deleted by the new index, the old one's late upsert refused)", got)
	}
	// Held (a bootstrap's reconcile of the new index) lists a, and an old
	// row as Older.
	pgHandle(t, h, pgEvent(redisx.OpUpsert, "old", "c", "", 7))
	var held []sink.HeldDoc
	if _, err := s.Held(context.Background(), "orders", "new", 10, func(p []sink.HeldDoc) error { held = append(held, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []sink.HeldDoc{{ID: "a", Shard: -1, SeqNo: 0}, {ID: "c", Shard: -1, SeqNo: 7, Older: true}}
	if fmt.Sprint(held) != fmt.Sprint(want) {
		t.Fatalf("Held = %+v, want %+v", held, want)
	}
}

// TestPostgres_Handler_NoGeneration: an event of an index uuid the feed has
// no generation for is retried (the relay writes it first: a lag).
func TestPostgres_Handler_NoGeneration(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t)
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	err := s.Handler()(context.Background(), pgEvent(redisx.OpUpsert, "unknown", "a", "", 1))
	if !errors.Is(err, sink.ErrNoGeneration) || redisx.IsPermanent(err) {
		t.Fatalf("err = %v, want a retryable ErrNoGeneration", err)
	}
}

// TestPostgres_Handler_BadSource: sources a jsonb column cannot hold are
// dead-lettered with the reason, and the other events of their batch are
// applied: \u0000 (refused before the batch), a number beyond jsonb's range
// and a lone surrogate (refused by PostgreSQL, so the batch is applied
// again one event per transaction).
func TestPostgres_Handler_BadSource(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	proxy := sinktest.StartProxy(t, rig.pg.Addr)
	pool, err := pgxpool.New(context.Background(), strings.Replace(rig.pg.URL("postgres"), rig.pg.Addr, proxy.Addr(), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := rig.sink(t, sink.PostgresConfig{Pool: pool, Schema: schema, Keys: keys})
	h := s.Handler()
	pgHandle(t, h, pgEvent(redisx.OpUpsert, "u1", "warm-up", "", 1))
	bad := map[string]string{
		"nul":       `{"s":"a\u0000b"}`,
		"huge":      `{"n":1e1000000}`,
		"surrogate": `{"s":"\ud800"}`,
	}
	want := map[string]string{"nul": `\u0000`, "huge": "overflows numeric format", "surrogate": "surrogate"}
	var evs []redisx.Event
	for i := range 20 {
		evs = append(evs, pgEvent(redisx.OpUpsert, "u1", fmt.Sprintf("good%d", i), "", 2))
	}
	for id, src := range bad {
		e := pgEvent(redisx.OpUpsert, "u1", id, "", 2)
		e.Source = json.RawMessage(src)
		evs = append(evs, e)
	}
	// Hold the first batch so the others queue up behind it: they are
	// applied together in the next.
	proxy.Gate.Hang()
	errs := make([]error, len(evs))
	done := make(chan int, len(evs))
	for i, e := range evs {
		go func() { errs[i] = h(context.Background(), e); done <- i }()
		if i == 0 {
			<-proxy.Gate.Stuck()
		}
	}
	time.Sleep(200 * time.Millisecond)
	proxy.Gate.Release()
	for range evs {
		<-done
	}
	for i, e := range evs {
		reason, isBad := want[e.ID]
		switch {
		case isBad && (!redisx.IsPermanent(errs[i]) || !strings.Contains(errs[i].Error(), reason)):
			t.Errorf("%s: err = %v, want a permanent error saying %q", e.ID, errs[i], reason)
		case !isBad && errs[i] != nil:
			t.Errorf("%s: err = %v, want nil: a bad event must not fail its batch", e.ID, errs[i])
		case !isBad && !rig.row(t, schema, "escf_orders", e.ID, "").found:
			t.Errorf("%s: handler returned nil but no row", e.ID)
		case isBad && rig.row(t, schema, "escf_orders", e.ID, "").found:
			t.Errorf("%s: a refused source has a row", e.ID)
		}
	}
	if st := s.Stats(); st.Refused != 3 {
		t.Errorf("Stats().Refused = %d, want 3", st.Refused)
	}
}

// TestPostgres_Table: an existing table is used when it has the sink's
// columns (generated ones besides) and refused, naming the columns, when
// it has others, lacks some, or has no unique index on (id, routing).
func TestPostgres_Table(t *testing.T) {
	rig := newPgRig(t)
	const cols = "id text NOT NULL, routing text NOT NULL, source jsonb NOT NULL, seq_no bigint NOT NULL, primary_term bigint NOT NULL, " +
		"version bigint NOT NULL, index_uuid text NOT NULL, shard int NOT NULL, updated_at timestamptz NOT NULL"
	tests := []struct {
		name, create string
		wantErr      []string
	}{
		{name: "created on first use"},
		{name: "the sink's own", create: "(" + cols + ", PRIMARY KEY (id, routing))"},
		{name: "a generated column", create: "(" + cols + ", title text GENERATED ALWAYS AS (source->>'title') STORED, PRIMARY KEY (routing, id))"},
		{name: "other columns", create: "(" + cols + ", note text, extra int, PRIMARY KEY (id, routing))",
			wantErr: []string{"columns the sink does not write: extra integer, note text"}},
		{name: "missing and wrong", create: "(id text, routing text, source json, seq_no int, PRIMARY KEY (id, routing))",
			wantErr: []string{"lacks primary_term bigint, version bigint", "source json, want jsonb", "seq_no integer, want bigint"}},
		{name: "no key", create: "(" + cols + ")", wantErr: []string{"no unique index on (id, routing)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schema, keys := rig.schema(t, "u1")
			if tt.create != "" {
				if _, err := rig.direct.Exec(context.Background(), "CREATE TABLE "+schema+".escf_orders "+tt.create); err != nil {
					t.Fatal(err)
				}
			}
			s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
			err := s.Handler()(context.Background(), pgEvent(redisx.OpUpsert, "u1", "a", "", 1))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if !rig.row(t, schema, "escf_orders", "a", "").found {
					t.Fatal("no row")
				}
				return
			}
			if !redisx.IsPermanent(err) {
				t.Fatalf("err = %v, want a permanent error", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to say %q", err, w)
				}
			}
		})
	}
	t.Run("a name over 63 bytes", func(t *testing.T) {
		// Two indices that differ only past PostgreSQL's 63 bytes: without
		// the hashed suffix PostgreSQL would cut both names to one table.
		schema, keys := rig.schema(t, "u1", "u2")
		s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
		long := "logs-" + strings.Repeat("x", 60)
		a := pgEvent(redisx.OpUpsert, "u1", "a", "", 1)
		a.Index = long + "-a"
		b := pgEvent(redisx.OpUpsert, "u2", "b", "", 1)
		b.Index = long + "-b"
		pgHandle(t, s.Handler(), a, b)
		for _, e := range []redisx.Event{a, b} {
			table := sink.PostgresTableName("escf_" + e.Index)
			if len(table) != sink.PostgresMaxName {
				t.Fatalf("table of %s: %q, want %d bytes", e.Index, table, sink.PostgresMaxName)
			}
			if !rig.row(t, schema, table, e.ID, "").found {
				t.Fatalf("no row %s in table %s", e.ID, table)
			}
			if rig.row(t, schema, table, map[string]string{"a": "b", "b": "a"}[e.ID], "").found {
				t.Fatalf("table %s holds the other index's document", table)
			}
		}
	})
	t.Run("two indices, one safe name", func(t *testing.T) {
		schema, keys := rig.schema(t, "u1", "u2")
		s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
		a := pgEvent(redisx.OpUpsert, "u1", "a", "", 1)
		a.Index = "logs-a"
		b := pgEvent(redisx.OpUpsert, "u2", "b", "", 1)
		b.Index = "logs.a"
		pgHandle(t, s.Handler(), a)
		s2 := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys}) // another consumer
		err := s2.Handler()(context.Background(), b)
		if !redisx.IsPermanent(err) || !strings.Contains(err.Error(), "indices logs-a and logs.a both map to table escf_logs_a") {
			t.Fatalf("err = %v, want a permanent error naming both indices and the table", err)
		}
	})
}

// TestPostgres_IndexDeleted: index_deleted deletes the index's rows, drops
// its table, or keeps its rows; in every mode the index's late events are
// refused, and a newer index of the name keeps its rows.
func TestPostgres_IndexDeleted(t *testing.T) {
	rig := newPgRig(t)
	for _, mode := range []sink.PostgresIndexDeleted{sink.PostgresDeleteRows, sink.PostgresDropTable, sink.PostgresKeepRows} {
		t.Run(string(mode), func(t *testing.T) {
			schema, keys := rig.schema(t, "old", "new")
			s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys, IndexDeleted: mode})
			h := s.Handler()
			end := redisx.Event{Op: redisx.OpIndexDeleted, Index: "orders", IndexUUID: "old", Target: "orders"}
			pgHandle(t, h, pgEvent(redisx.OpUpsert, "old", "a", "", 1), pgEvent(redisx.OpDelete, "old", "b", "", 2), end)
			pgHandle(t, h, pgEvent(redisx.OpUpsert, "old", "late", "", 9))
			var tables int
			if err := rig.direct.QueryRow(context.Background(), "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'escf_orders'", schema).Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if got, want := tables == 1, mode != sink.PostgresDropTable; got != want {
				t.Fatalf("table escf_orders exists: %v, want %v", got, want)
			}
			if tables == 1 {
				if got, want := rig.row(t, schema, "escf_orders", "a", "").found, mode == sink.PostgresKeepRows; got != want {
					t.Fatalf("row a kept: %v, want %v", got, want)
				}
				if rig.row(t, schema, "escf_orders", "late", "").found {
					t.Fatal("a late event of the ended index was applied")
				}
			}
			// The index created again: its rows stay when the old one's
			// end comes again (a redelivery), in every mode.
			pgHandle(t, h, pgEvent(redisx.OpUpsert, "new", "a", "", 0), end)
			if got := rig.row(t, schema, "escf_orders", "a", ""); !got.found || got.uuid != "new" {
				t.Fatalf("row a of the new index: %+v", got)
			}
		})
	}
}

// TestPostgres_Outage: while PostgreSQL is down a handler waits (retrying
// with backoff) and returns nil only once its batch (or the creation of
// its table, or its index's end) committed after the restart; a handler whose ctx ends first returns a retryable error (its
// event stays pending).
func TestPostgres_Outage(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1", "u2", "u3")
	s := rig.sink(t, sink.PostgresConfig{URL: rig.pg.URL("postgres"), Schema: schema, Keys: keys, MaxRetryBackoff: 200 * time.Millisecond})
	h := s.Handler()
	ending := pgEvent(redisx.OpUpsert, "u3", "gone", "", 1)
	ending.Index = "ending"
	pgHandle(t, h, pgEvent(redisx.OpUpsert, "u1", "before", "", 1), ending)
	rig.pg.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := h(ctx, pgEvent(redisx.OpUpsert, "u1", "given-up", "", 1))
	cancel()
	if err == nil || redisx.IsPermanent(err) {
		t.Fatalf("handler with PostgreSQL down and its ctx ending: %v, want a retryable error", err)
	}
	// Three handlers wait: an event of a table the sink knows (its batch
	// is retried), the first event of a table it has not created yet, and
	// an index_deleted (the handlers' own statements are retried: an
	// error would count as a delivery, and enough of them would
	// dead-letter the event unapplied).
	fresh := pgEvent(redisx.OpUpsert, "u2", "first", "", 1)
	fresh.Index = "fresh"
	end := redisx.Event{StreamID: "9-0", Op: redisx.OpIndexDeleted, Index: "ending", IndexUUID: "u3", Target: "ending"}
	waiting := []redisx.Event{pgEvent(redisx.OpUpsert, "u1", "waited", "", 1), fresh, end}
	waited := make(chan error, len(waiting))
	for _, e := range waiting {
		go func() { waited <- h(context.Background(), e) }()
	}
	time.Sleep(time.Second)
	select {
	case err := <-waited:
		t.Fatalf("a handler returned %v while PostgreSQL was down", err)
	default:
	}
	rig.pg.StartAgain()
	for range waiting {
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("handler after the restart: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a handler did not return within 30s of the restart")
		}
	}
	if !rig.row(t, schema, "escf_orders", "waited", "").found || !rig.row(t, schema, "escf_fresh", "first", "").found {
		t.Fatal("the handlers returned nil, but their rows are missing")
	}
	if rig.row(t, schema, "escf_ending", "gone", "").found {
		t.Fatal("index_deleted returned nil, but the index's row is still there")
	}
	// The event whose handler gave up stays pending (not acknowledged);
	// its batch may still have committed after the restart: delivered
	// again, the fence makes it harmless.
	if s.Stats().Retries == 0 {
		t.Fatal("no retry counted")
	}
}

// TestPostgres_PurgeTombstones: tombstones older than TombstoneKeep go.
func TestPostgres_PurgeTombstones(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys, TombstoneKeep: time.Hour})
	pgHandle(t, s.Handler(), pgEvent(redisx.OpDelete, "u1", "old", "", 5), pgEvent(redisx.OpDelete, "u1", "new", "", 5))
	if _, err := rig.direct.Exec(context.Background(), "UPDATE "+schema+".escf__tombstones SET deleted_at = now() - interval '2 hours' WHERE id = 'old'"); err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeTombstones(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("PurgeTombstones = %d, %v; want 1", n, err)
	}
	// The kept one still refuses an older upsert; the purged one no longer
	// can (the documented limit of TombstoneKeep).
	pgHandle(t, s.Handler(), pgEvent(redisx.OpUpsert, "u1", "old", "", 4), pgEvent(redisx.OpUpsert, "u1", "new", "", 4))
	if rig.row(t, schema, "escf_orders", "new", "").found || !rig.row(t, schema, "escf_orders", "old", "").found {
		t.Fatal("want new refused by its tombstone, old written again")
	}
}

// TestPostgres_ConcurrentConsumers: two sinks (two consumers of a group)
// apply an upsert and a newer delete of the same documents at the same
// time, in batches of many documents: whichever commits first, no row may
// survive its delete (the table's lock orders their transactions; without
// it an upsert could insert a row whose delete was not yet committed and
// read no tombstone).
func TestPostgres_ConcurrentConsumers(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	a := rig.sink(t, sink.PostgresConfig{URL: rig.pg.URL("postgres"), Schema: schema, Keys: keys})
	b := rig.sink(t, sink.PostgresConfig{URL: rig.pg.URL("postgres"), Schema: schema, Keys: keys})
	const docs, lanes = 400, 16
	errs := make(chan error, 2*docs)
	run := func(h redisx.Handler, op redisx.Op, seq int64) {
		for l := range lanes {
			go func() {
				for d := l; d < docs; d += lanes {
					errs <- h(context.Background(), pgEvent(op, "u1", fmt.Sprintf("d%d", d), "", seq))
				}
			}()
		}
	}
	// No document exists yet: the delete has no row to lock, only its
	// tombstone to record.
	run(a.Handler(), redisx.OpUpsert, 5)
	run(b.Handler(), redisx.OpDelete, 6)
	for range 2 * docs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var left int
	if err := rig.direct.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".escf_orders").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d rows outlived their delete", left)
	}
}
