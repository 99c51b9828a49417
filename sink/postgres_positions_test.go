package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// pgBackup copies every table of schema into a new schema, from one
// REPEATABLE READ snapshot: what a backup (pg_dump, a base backup, a
// replica at that moment) holds. It returns the copy's schema.
func (r *pgRig) pgBackup(tb testing.TB, schema string) string {
	tb.Helper()
	ctx := context.Background()
	bk := fmt.Sprintf("%s_bk%d", schema, r.n.Add(1))
	err := pgx.BeginTxFunc(ctx, r.direct, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema) // takes the snapshot
		if err != nil {
			return err
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+bk); err != nil {
			return err
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, "CREATE TABLE "+pgx.Identifier{bk, t}.Sanitize()+" AS SELECT * FROM "+pgx.Identifier{schema, t}.Sanitize()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return bk
}

// pgRestore puts the tables of schema back as backup bk holds them, in one
// transaction: the database restored from an older backup.
func (r *pgRig) pgRestore(tb testing.TB, schema, bk string) {
	tb.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, r.direct, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", bk)
		if err != nil {
			return err
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, t := range tables {
			q := pgx.Identifier{schema, t}.Sanitize()
			if _, err := tx.Exec(ctx, "TRUNCATE "+q); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+q+" SELECT * FROM "+pgx.Identifier{bk, t}.Sanitize()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// pgHeld is what a schema (the live one or a backup) holds of the
// documents of table escf_orders, all written by pgEvent upserts (entry
// id seq_no+1), and what escf__applied_slots says was applied for
// (stream, group).
type pgHeld struct {
	rows      int64  // documents
	top       string // the entry id of the newest row: "<max seq_no + 1>-0"
	entries   int64  // summed over the slots
	committed string // the highest last_id
}

func (r *pgRig) held(tb testing.TB, schema, stream, group string) pgHeld {
	tb.Helper()
	ctx := context.Background()
	var h pgHeld
	var top *int64
	if err := r.direct.QueryRow(ctx, "SELECT count(*), max(seq_no) FROM "+pgx.Identifier{schema, "escf_orders"}.Sanitize()).Scan(&h.rows, &top); err != nil {
		tb.Fatal(err)
	}
	if top != nil {
		h.top = fmt.Sprintf("%d-0", *top+1)
	}
	// The query docs/CONSUMING.md gives for it.
	err := r.direct.QueryRow(ctx, "SELECT coalesce(sum(entries), 0)::bigint, coalesce((SELECT last_id FROM "+pgx.Identifier{schema, sink.PostgresAppliedSlotsTable}.Sanitize()+
		" WHERE stream = $1 AND consumer_group = $2 ORDER BY split_part(last_id, '-', 1)::numeric DESC, split_part(last_id, '-', 2)::numeric DESC LIMIT 1), '') "+
		"FROM "+pgx.Identifier{schema, sink.PostgresAppliedSlotsTable}.Sanitize()+" WHERE stream = $1 AND consumer_group = $2", stream, group).Scan(&h.entries, &h.committed)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// exact says how h's record differs from its rows ("" when it does not).
func (h pgHeld) exact() string {
	if h.entries != h.rows || h.committed != h.top {
		return fmt.Sprintf("the rows hold %d documents up to entry %q, %s says %d entries up to %q",
			h.rows, h.top, sink.PostgresAppliedSlotsTable, h.entries, h.committed)
	}
	return ""
}

// TestPostgres_AppliedSlots_Backup: what escf__applied_slots says was
// applied is, in every consistent snapshot of the database taken while 8
// lanes apply batches (a backup, a replica), exactly what the rows hold —
// as many entries, up to the same one — and after the database is
// restored from one of them, Applied's Committed is the newest entry the
// rows hold.
func TestPostgres_AppliedSlots_Backup(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	h := s.Handler()
	stream := keys.Events()
	ctx := redisx.WithDelivery(context.Background(), redisx.Delivery{Stream: stream, Group: "g"})
	const docs, lanes = 1200, 8
	// Every document once (distinct ids: each entry is one row), its
	// seq_no its number; the first alone (it creates the table).
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return h(ctx, e) }, pgEvent(redisx.OpUpsert, "u1", "d0", "", 0))
	var wg sync.WaitGroup
	var failed atomic.Value
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := 1 + l; d < docs; d += lanes {
				if err := h(ctx, pgEvent(redisx.OpUpsert, "u1", fmt.Sprintf("d%d", d), "", int64(d))); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	writing := make(chan struct{})
	go func() { wg.Wait(); close(writing) }()
	var mid []string // backups taken with some of the rows written
	for done := false; !done; {
		select {
		case <-writing:
			done = true
		default:
		}
		bk := rig.pgBackup(t, schema)
		got := rig.held(t, bk, stream, "g")
		if d := got.exact(); d != "" {
			t.Fatalf("a backup taken while batches commit: %s", d)
		}
		if got.rows > 0 && got.rows < docs {
			mid = append(mid, bk)
		}
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	if got := rig.held(t, schema, stream, "g"); got.exact() != "" || got.rows != docs {
		t.Fatalf("after the run: %s (%d rows, want %d)", got.exact(), got.rows, docs)
	}
	if len(mid) < 3 {
		t.Fatalf("only %d backups caught the batches midway: the test shows nothing", len(mid))
	}
	bk := mid[len(mid)/2]
	rig.pgRestore(t, schema, bk)
	got := rig.held(t, schema, stream, "g")
	if d := got.exact(); d != "" {
		t.Fatalf("restored from a backup: %s", d)
	}
	p, err := s.Applied(context.Background(), stream, "g")
	if err != nil {
		t.Fatal(err)
	}
	if p.Committed != got.top {
		t.Fatalf("restored from a backup with %d rows up to entry %s: Applied says Committed %q", got.rows, got.top, p.Committed)
	}
	t.Logf("%d backups midway; restored one with %d of %d rows, up to %s", len(mid), got.rows, docs, got.top)
}

// TestPostgres_AppliedSlots_RolledBack: a batch whose transaction rolls
// back — here at COMMIT, after every statement ran, the record's
// included (a deferred constraint trigger refuses one document) —
// records nothing, and this sink does not take its own rolled back
// record for a loss of the database.
func TestPostgres_AppliedSlots_RolledBack(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	h := s.Handler()
	stream := keys.Events()
	ctx := redisx.WithDelivery(context.Background(), redisx.Delivery{Stream: stream, Group: "g"})
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return h(ctx, e) },
		pgEvent(redisx.OpUpsert, "u1", "a", "", 1), pgEvent(redisx.OpUpsert, "u1", "b", "", 2))
	bg := context.Background()
	for _, q := range []string{
		"CREATE FUNCTION " + schema + ".boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " +
			"IF NEW.id = 'boom' THEN RAISE EXCEPTION 'refused at commit'; END IF; RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER boom AFTER INSERT OR UPDATE ON " + schema + ".escf_orders " +
			"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + schema + ".boom()",
	} {
		if _, err := rig.direct.Exec(bg, q); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Stats().Transactions
	err := h(ctx, pgEvent(redisx.OpUpsert, "u1", "boom", "", 9))
	if err == nil {
		t.Fatal("the batch refused at commit: handler returned nil")
	}
	if s.Stats().Transactions != before {
		t.Fatal("a transaction refused at commit was counted as committed")
	}
	got := rig.held(t, schema, stream, "g")
	if d := got.exact(); d != "" || got.rows != 2 || got.committed != "3-0" {
		t.Fatalf("after a batch rolled back: %+v %s; want 2 entries up to 3-0", got, d)
	}
	var tx int64
	if err := rig.direct.QueryRow(bg, "SELECT sum(transactions) FROM "+schema+"."+sink.PostgresAppliedSlotsTable).Scan(&tx); err != nil || tx != 2 {
		t.Fatalf("transactions recorded: %d, %v; want 2", tx, err)
	}
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return h(ctx, e) }, pgEvent(redisx.OpUpsert, "u1", "c", "", 3))
	if got := rig.held(t, schema, stream, "g"); got.exact() != "" || got.rows != 3 || got.committed != "4-0" {
		t.Fatalf("the next batch: %+v %s; want 3 entries up to 4-0", got, got.exact())
	}
	if err := s.Advance(bg, stream, "g", redisx.Position{Lead: "50-0", Low: "4-0"}, ""); err != nil {
		t.Fatalf("Advance after a batch rolled back: %v, want nil (the database lost nothing)", err)
	}
}

// TestPostgres_Advance_LostTransactions: a database restored from a backup
// taken after the lead of some entries was recorded (Advance, written
// ahead) but before their batches committed keeps a lead that is not
// behind, and lost rows the group acknowledged: Advance says so (a
// *redisx.BehindError with Lost, holding the restored low water to hand
// the entries on again from), once, whether a commit or Advance finds it.
func TestPostgres_Advance_LostTransactions(t *testing.T) {
	rig := newPgRig(t)
	for _, tc := range []struct {
		name   string
		commit bool // a batch commits into the restored database before Advance
	}{
		{name: "found by Advance"},
		{name: "found by a commit", commit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema, keys := rig.schema(t, "u1")
			s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
			stream := keys.Events()
			ctx := redisx.WithDelivery(context.Background(), redisx.Delivery{Stream: stream, Group: "g"})
			h := func(_ context.Context, e redisx.Event) error { return s.Handler()(ctx, e) }
			bg := context.Background()
			pgHandle(t, h, pgEvent(redisx.OpUpsert, "u1", "d1", "", 1), pgEvent(redisx.OpUpsert, "u1", "d2", "", 2))
			if err := s.Advance(bg, stream, "g", redisx.Position{Lead: "10-0", Low: "2-0"}, ""); err != nil {
				t.Fatal(err)
			}
			bk := rig.pgBackup(t, schema) // lead 10-0, rows up to 3-0
			for seq := int64(3); seq <= 9; seq++ {
				pgHandle(t, h, pgEvent(redisx.OpUpsert, "u1", fmt.Sprintf("d%d", seq), "", seq))
			}
			if err := s.Advance(bg, stream, "g", redisx.Position{Lead: "10-0", Low: "10-0"}, "10-0"); err != nil {
				t.Fatalf("Advance with nothing lost: %v, want nil", err)
			}
			rig.pgRestore(t, schema, bk)
			if tc.commit {
				pgHandle(t, h, pgEvent(redisx.OpUpsert, "u1", "d10", "", 10))
			}
			err := s.Advance(bg, stream, "g", redisx.Position{Lead: "20-0", Low: "11-0"}, "10-0")
			var be *redisx.BehindError
			if !errors.As(err, &be) || be.Lost == "" {
				t.Fatalf("Advance over a database that lost 7 committed transactions (its lead 10-0 not behind): %v; want a *BehindError with Lost", err)
			}
			want := redisx.Position{Lead: "10-0", Low: "2-0", Committed: "3-0"}
			if tc.commit {
				want.Committed = "11-0"
			}
			if be.Recorded != want {
				t.Fatalf("BehindError.Recorded = %+v, want %+v (the restored low water)", be.Recorded, want)
			}
			t.Logf("%v", be)
			if err := s.Advance(bg, stream, "g", redisx.Position{Lead: "30-0", Low: "21-0"}, "20-0"); err != nil {
				t.Fatalf("the next Advance: %v, want nil (the loss was said)", err)
			}
			pgHandle(t, h, pgEvent(redisx.OpUpsert, "u1", "d30", "", 30))
			if err := s.Advance(bg, stream, "g", redisx.Position{Lead: "40-0", Low: "31-0"}, "30-0"); err != nil {
				t.Fatalf("Advance after a commit that followed the loss: %v, want nil", err)
			}
		})
	}
}

// TestPostgres_FoldAppliedSlots: slots unused for a week fold into the
// empty-named one of their stream and group: the highest entry and the
// counts kept, this sink's own slot left alone.
func TestPostgres_FoldAppliedSlots(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	stream := keys.Events()
	ctx := redisx.WithDelivery(context.Background(), redisx.Delivery{Stream: stream, Group: "g"})
	bg := context.Background()
	for i, seq := range []int64{7, 3, 5} { // three processes, one after the other
		s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
		pgHandle(t, func(_ context.Context, e redisx.Event) error { return s.Handler()(ctx, e) }, pgEvent(redisx.OpUpsert, "u1", fmt.Sprintf("d%d", i), "", seq))
		if i < 2 {
			if err := s.Close(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	sl := schema + "." + sink.PostgresAppliedSlotsTable
	if _, err := rig.direct.Exec(bg, "UPDATE "+sl+" SET updated_at = now() - interval '8 days'"); err != nil {
		t.Fatal(err)
	}
	live := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return live.Handler()(ctx, e) }, pgEvent(redisx.OpUpsert, "u1", "d9", "", 1))
	before := rig.held(t, schema, stream, "g")
	n, err := live.FoldAppliedSlots(bg)
	if err != nil || n != 3 {
		t.Fatalf("FoldAppliedSlots = %d, %v; want the 3 unused slots", n, err)
	}
	var slots int
	if err := rig.direct.QueryRow(bg, "SELECT count(*) FROM "+sl).Scan(&slots); err != nil || slots != 2 {
		t.Fatalf("%d slots after the fold (%v), want 2: the folded one and the live sink's", slots, err)
	}
	if got := rig.held(t, schema, stream, "g"); got != before || got.committed != "8-0" || got.entries != 4 {
		t.Fatalf("after the fold: %+v, want %+v (4 entries up to 8-0)", got, before)
	}
	if n, err := live.FoldAppliedSlots(bg); err != nil || n != 0 {
		t.Fatalf("a second fold: %d, %v; want 0", n, err)
	}
	if err := live.Advance(bg, stream, "g", redisx.Position{Lead: "9-0"}, ""); err != nil {
		t.Fatalf("Advance after a fold: %v, want nil (the live sink's slot stays)", err)
	}
}

// TestPostgres_Pool_RestoredWhileRunning: a consumer pool with the
// PostgreSQL sink as its Positions. The database is restored, while the
// pool runs, from a backup taken after the pool recorded the lead of
// entries 2..10 (written ahead) and before the rows of 6..10 committed;
// the group acknowledged them since. The lead the database holds is not
// behind, so only the record of the batches' transactions tells: at its
// next read the pool hands the entries from the restored low water on
// again, and the table holds every document of the stream.
func TestPostgres_Pool_RestoredWhileRunning(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "U")
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	bg := context.Background()
	add := func(from, to int) {
		t.Helper()
		for n := from; n <= to; n++ {
			e := redisx.Event{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U", ID: fmt.Sprintf("d%d", n), SeqNo: int64(n), PrimaryTerm: 1, Version: 1,
				Source: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
			if err := rig.rdb.XAdd(bg, &redis.XAddArgs{Stream: keys.Events(), ID: fmt.Sprintf("%d-0", n), Values: e.Values()}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := rig.direct.QueryRow(bg, "SELECT count(*) FROM "+schema+".escf_orders").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	lead := func() string {
		t.Helper()
		p, err := s.Applied(bg, keys.Events(), "g")
		if err != nil {
			t.Fatal(err)
		}
		return p.Lead
	}
	// Entries 6..10 wait at the sink's door until released.
	release := make(chan struct{})
	h := func(ctx context.Context, e redisx.Event) error {
		if e.SeqNo >= 6 && e.SeqNo <= 10 {
			<-release
		}
		return s.Handler()(ctx, e)
	}
	pool, err := consumer.NewPool(consumer.PoolConfig{Client: rig.rdb, Keys: keys, Group: "g", Consumer: "c1", Positions: s,
		Block: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx, h) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	add(1, 1)
	waitFor("entry 1 applied", func() bool { return pool.Stats().Acked == 1 })
	add(2, 10)
	waitFor("2..5 applied, the lead of 2..10 recorded", func() bool { return rows() == 5 && lead() == "10-0" })
	bk := rig.pgBackup(t, schema)
	close(release)
	waitFor("2..10 applied and acknowledged", func() bool { return pool.Stats().Acked == 10 })
	rig.pgRestore(t, schema, bk)
	if got := rows(); got != 5 {
		t.Fatalf("restored: %d rows, want 5", got)
	}
	add(11, 11)
	waitFor("every document of the stream in the table", func() bool { return rows() == 11 })
	p, err := s.Applied(bg, keys.Events(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if p.Committed != "11-0" || p.Lead != "11-0" {
		t.Fatalf("Applied = %+v, want lead and committed 11-0", p)
	}
}

// TestPostgres_AppliedSlots_OlderTables: a schema whose sink tables an
// earlier version created (no escf__applied_slots) keeps its position;
// the table of the record is added at the start.
func TestPostgres_AppliedSlots_OlderTables(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1")
	bg := context.Background()
	for _, q := range []string{ // as the version before created them
		"CREATE TABLE " + schema + ".escf__indices (index_uuid text PRIMARY KEY, index_name text NOT NULL, table_name text NOT NULL, " +
			"generation bigint NOT NULL, ended_at timestamptz)",
		"CREATE TABLE " + schema + ".escf__tombstones (table_name text NOT NULL, id text NOT NULL, routing text NOT NULL, " +
			"index_uuid text NOT NULL, seq_no bigint NOT NULL, deleted_at timestamptz NOT NULL, PRIMARY KEY (table_name, id, routing))",
		"CREATE TABLE " + schema + ".escf__applied (stream text NOT NULL, consumer_group text NOT NULL, lead text NOT NULL, " +
			"low text NOT NULL, updated_at timestamptz NOT NULL, PRIMARY KEY (stream, consumer_group))",
		"INSERT INTO " + schema + ".escf__applied VALUES ('" + keys.Events() + "', 'g', '5-0', '3-0', now())",
	} {
		if _, err := rig.direct.Exec(bg, q); err != nil {
			t.Fatal(err)
		}
	}
	s := rig.sink(t, sink.PostgresConfig{Schema: schema, Keys: keys})
	if got, err := s.Applied(bg, keys.Events(), "g"); err != nil || got != (redisx.Position{Lead: "5-0", Low: "3-0"}) {
		t.Fatalf("Applied over the earlier tables: %+v, %v; want lead 5-0, low 3-0, nothing committed", got, err)
	}
	ctx := redisx.WithDelivery(bg, redisx.Delivery{Stream: keys.Events(), Group: "g"})
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return s.Handler()(ctx, e) }, pgEvent(redisx.OpUpsert, "u1", "d6", "", 5))
	if got, err := s.Applied(bg, keys.Events(), "g"); err != nil || got != (redisx.Position{Lead: "5-0", Low: "3-0", Committed: "6-0"}) {
		t.Fatalf("Applied after a batch: %+v, %v; want committed 6-0", got, err)
	}
	if err := s.Advance(bg, keys.Events(), "g", redisx.Position{Lead: "7-0", Low: "6-0"}, "5-0"); err != nil {
		t.Fatal(err)
	}
}

// TestPostgres_AppliedSlots_NoSharedLock: two consumers' sinks apply
// batches to two tables; while one's transaction is held at its COMMIT
// (a deferred trigger sleeps) after writing its record, the other's batch
// commits at once: the records never make consumers wait for each other
// (one row shared by both would hold the second on the first's lock).
func TestPostgres_AppliedSlots_NoSharedLock(t *testing.T) {
	rig := newPgRig(t)
	schema, keys := rig.schema(t, "u1", "u2")
	bg := context.Background()
	ctx := redisx.WithDelivery(bg, redisx.Delivery{Stream: keys.Events(), Group: "g"})
	a := rig.sink(t, sink.PostgresConfig{URL: rig.pg.URL("postgres"), Schema: schema, Keys: keys})
	b := rig.sink(t, sink.PostgresConfig{URL: rig.pg.URL("postgres"), Schema: schema, Keys: keys})
	other := func(id string, seq int64) redisx.Event {
		e := pgEvent(redisx.OpUpsert, "u2", id, "", seq)
		e.Index = "other"
		return e
	}
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return a.Handler()(ctx, e) }, pgEvent(redisx.OpUpsert, "u1", "a0", "", 1))
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return b.Handler()(ctx, e) }, other("b0", 2))
	for _, q := range []string{
		"CREATE FUNCTION " + schema + ".slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " +
			"IF NEW.id = 'slow' THEN PERFORM pg_sleep(3); END IF; RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER slow AFTER INSERT OR UPDATE ON " + schema + ".escf_orders " +
			"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + schema + ".slow()",
	} {
		if _, err := rig.direct.Exec(bg, q); err != nil {
			t.Fatal(err)
		}
	}
	slow := make(chan error, 1)
	go func() { slow <- a.Handler()(ctx, pgEvent(redisx.OpUpsert, "u1", "slow", "", 3)) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := rig.direct.QueryRow(bg, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow transaction never reached its COMMIT")
		}
	}
	began := time.Now()
	pgHandle(t, func(_ context.Context, e redisx.Event) error { return b.Handler()(ctx, e) }, other("b1", 4))
	took := time.Since(began)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if took > time.Second {
		t.Fatalf("a batch on another table took %s while a consumer's transaction was held at its COMMIT: it waited for its lock", took.Round(time.Millisecond))
	}
	if got := rig.held(t, schema, keys.Events(), "g"); got.committed != "5-0" || got.entries != 4 {
		t.Fatalf("the slots record %d entries up to %s, want 4 up to 5-0", got.entries, got.committed)
	}
}
