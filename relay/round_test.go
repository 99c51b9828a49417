package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// roundEnv is an emulated cluster, a real Redis and one feed's store,
// whose lease the test holds: what a Relay's round reads and writes.
type roundEnv struct {
	feedEnv
	emu   *esemu.Cluster
	keys  redisx.Keys
	lease *redisx.Lease
	store *checkpoint.Store
}

func newRoundEnv(tb testing.TB, feed string) roundEnv {
	tb.Helper()
	emu, err := esemu.New(esemu.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { emu.Close() })
	client, err := es.New(es.Config{URLs: []string{emu.URL()}})
	if err != nil {
		tb.Fatal(err)
	}
	e := roundEnv{feedEnv: feedEnv{url: emu.URL(), client: client, rdb: redistest.Start(tb).Client(tb)}, emu: emu, keys: redisx.NewKeys(feed)}
	e.lease, err = redisx.NewLease(redisx.LeaseConfig{Client: e.rdb, Key: e.keys.Lease(), TTL: time.Minute, Owner: "test"})
	if err != nil {
		tb.Fatal(err)
	}
	if ok, err := e.lease.TryAcquire(context.Background()); !ok || err != nil {
		tb.Fatalf("lease: %v %v", ok, err)
	}
	if e.store, err = checkpoint.New(checkpoint.Config{Client: e.rdb, Keys: e.keys, Lease: e.lease}); err != nil {
		tb.Fatal(err)
	}
	return e
}

// relay is a Relay of the env's feed on targets; mod, if set, adjusts its
// Config. Stats are read index by index (no batching window).
func (e roundEnv) relay(tb testing.TB, targets []string, mod func(*Config)) *Relay {
	tb.Helper()
	cfg := Config{ES: e.client, Store: e.store, Lease: e.lease, Targets: targets, StatsWindow: -1,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: prometheus.NewRegistry()}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// write indexes each "id" (or deletes each "-id") in one refreshed bulk.
func (e roundEnv) write(tb testing.TB, index string, ops ...string) {
	tb.Helper()
	var b strings.Builder
	for _, op := range ops {
		if id, ok := strings.CutPrefix(op, "-"); ok {
			fmt.Fprintf(&b, "{\"delete\":{\"_id\":%q}}\n", id)
			continue
		}
		fmt.Fprintf(&b, "{\"index\":{\"_id\":%q}}\n{\"v\":%q}\n", op, op)
	}
	e.do(tb, http.MethodPost, "/"+index+"/_bulk?refresh=true", b.String())
}

// events returns the stream's events in order.
func (e roundEnv) events(tb testing.TB) []redisx.Event {
	tb.Helper()
	msgs, err := e.rdb.XRange(context.Background(), e.keys.Events(), "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]redisx.Event, 0, len(msgs))
	for _, m := range msgs {
		ev, err := redisx.ParseEvent(m)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// upserted lists the ids of the stream's upserts, in order, each with its
// seq no ("a@0").
func (e roundEnv) upserted(tb testing.TB) []string {
	tb.Helper()
	var out []string
	for _, ev := range e.events(tb) {
		if ev.Op == redisx.OpUpsert {
			out = append(out, fmt.Sprintf("%s@%d", ev.ID, ev.SeqNo))
		}
	}
	return out
}

// ops lists the stream's events as "op id" (id empty for index events).
func (e roundEnv) ops(tb testing.TB) []string {
	tb.Helper()
	var out []string
	for _, ev := range e.events(tb) {
		out = append(out, strings.TrimSpace(string(ev.Op)+" "+ev.ID))
	}
	return out
}

func (e roundEnv) state(tb testing.TB) checkpoint.State {
	tb.Helper()
	st, err := e.store.Load(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// shardState is what Redis holds of one shard: its checkpoint (-2:
// absent) and gap counter.
func (e roundEnv) shardState(tb testing.TB, uuid string, shard int) (cp, gap int64) {
	tb.Helper()
	st := e.state(tb)
	id := checkpoint.ShardID{IndexUUID: uuid, Shard: shard}
	cp, ok := st.Checkpoints[id]
	if !ok {
		cp = -2
	}
	return cp, st.Gaps[id]
}

// metric is the value of r's gauge or counter name whose labels
// include the pairs given ("index", "idx", "shard", "0").
func metric(tb testing.TB, r *Relay, name string, labels ...string) float64 {
	tb.Helper()
	mfs, err := r.cfg.Metrics.(prometheus.Gatherer).Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	tb.Fatalf("no series %s%v", name, labels)
	return 0
}

// nextTick lets the cursor's next round read again, as a round on the
// next poll tick does (a loop forces one refresh per index and tick).
func (cur *cursor) nextTick() { cur.refreshed, cur.late = 0, false }

// TestRelay_Round: one index, one shard, read by successive rounds: what
// each round commits (events, checkpoint, gap counter) and leaves pending.
// The last page of a window is held for the next round's stats to settle,
// unless the holds are full; the pages before it settle at once; seq nos
// without a hit (deletes, superseded versions) count as the gap.
func TestRelay_Round(t *testing.T) {
	tests := []struct {
		name      string
		ops       []string // written before the first round
		batch     int
		holdsFull bool
		// After the first round: the upserts, the checkpoint (-2: none)
		// and whether a page is pending.
		first   []string
		firstCP int64
		pending bool
		// After the second round.
		second   []string
		secondCP int64
		gap      int64
	}{
		{name: "empty index", first: nil, firstCP: -2, second: nil, secondCP: -2},
		{name: "one page: held, settled by the next round's stats", ops: []string{"a", "b", "c"}, batch: 10,
			firstCP: -2, pending: true,
			second: []string{"a@0", "b@1", "c@2"}, secondCP: 2},
		{name: "pages before the last settle at once", ops: []string{"a", "b", "c", "d", "e"}, batch: 2,
			first: []string{"a@0", "b@1", "c@2", "d@3"}, firstCP: 3, pending: true,
			second: []string{"a@0", "b@1", "c@2", "d@3", "e@4"}, secondCP: 4},
		{name: "holds full: the last page settles at once", ops: []string{"a", "b", "c"}, batch: 10, holdsFull: true,
			first: []string{"a@0", "b@1", "c@2"}, firstCP: 2,
			second: []string{"a@0", "b@1", "c@2"}, secondCP: 2},
		{name: "a delete and a superseded version are a gap", ops: []string{"a", "b", "c", "-b", "c"}, batch: 10,
			firstCP: -2, pending: true,
			second: []string{"a@0", "c@4"}, secondCP: 4, gap: 3},
		{name: "a full page below the gcp, then an empty last page", ops: []string{"a", "b", "c", "-c"}, batch: 2,
			first: []string{"a@0", "b@1"}, firstCP: 1, pending: true,
			second: []string{"a@0", "b@1"}, secondCP: 3, gap: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRoundEnv(t, "round")
			e.create(t, "idx", 1)
			if len(tt.ops) > 0 {
				e.write(t, "idx", tt.ops...)
			}
			r := e.relay(t, []string{"idx"}, func(c *Config) { c.BatchSize = tt.batch })
			if tt.holdsFull && !r.hold(r.cfg.ReadConcurrency*r.cfg.BatchSize) {
				t.Fatal("could not fill the holds")
			}
			ctx := context.Background()
			cur := &cursor{target: "idx"}
			if err := r.round(ctx, "idx", cur); err != nil {
				t.Fatalf("first round: %v", err)
			}
			if cur.uuid == "" {
				t.Fatal("the first round adopted no uuid")
			}
			cp, _ := e.shardState(t, cur.uuid, 0)
			if got := e.upserted(t); !slices.Equal(got, tt.first) || cp != tt.firstCP {
				t.Errorf("after the first round: upserts %v, checkpoint %d; want %v, %d", got, cp, tt.first, tt.firstCP)
			}
			if _, got := cur.pending[0]; got != tt.pending {
				t.Errorf("after the first round: page pending %v, want %v", got, tt.pending)
			}
			held := 0
			if pg, ok := cur.pending[0]; ok {
				held = pg.size()
			}
			if tt.holdsFull {
				held = r.cfg.ReadConcurrency * r.cfg.BatchSize
			}
			if r.held != held {
				t.Errorf("after the first round: %d hits held, want %d", r.held, held)
			}
			cur.nextTick()
			if err := r.round(ctx, "idx", cur); err != nil {
				t.Fatalf("second round: %v", err)
			}
			cp, gap := e.shardState(t, cur.uuid, 0)
			if got := e.upserted(t); !slices.Equal(got, tt.second) || cp != tt.secondCP || gap != tt.gap {
				t.Errorf("after the second round: upserts %v, checkpoint %d, gap %d; want %v, %d, %d", got, cp, gap, tt.second, tt.secondCP, tt.gap)
			}
			if len(cur.pending) != 0 {
				t.Errorf("after the second round: pages pending %v, want none", sortedShards(cur.pending))
			}
			if tt.secondCP >= 0 {
				if got := metric(t, r, "escf_shard_checkpoint", "index", "idx", "shard", "0"); got != float64(tt.secondCP) {
					t.Errorf("escf_shard_checkpoint = %g, want %d", got, tt.secondCP)
				}
				if got := cur.gaps[0]; got != tt.gap {
					t.Errorf("the cursor's gap = %d, want %d (as committed)", got, tt.gap)
				}
			}
			for _, ev := range e.events(t) {
				if ev.IndexUUID != cur.uuid || ev.Index != "idx" || ev.Target != "idx" || ev.Shard != 0 {
					t.Errorf("event %+v: want index idx, uuid %s, target idx, shard 0", ev, cur.uuid)
				}
			}
		})
	}
}

// TestRelay_Round_ManyShards: the shards of an index are read in one
// round, each to its own checkpoint, whatever the read concurrency.
func TestRelay_Round_ManyShards(t *testing.T) {
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprintf("concurrency %d", conc), func(t *testing.T) {
			e := newRoundEnv(t, "shards")
			e.create(t, "idx", 3)
			var ids []string
			for i := range 30 {
				ids = append(ids, fmt.Sprintf("d%02d", i))
			}
			e.write(t, "idx", ids...)
			r := e.relay(t, []string{"idx"}, func(c *Config) { c.BatchSize, c.ReadConcurrency = 4, conc })
			ctx := context.Background()
			cur := &cursor{target: "idx"}
			for i := range 2 {
				if err := r.round(ctx, "idx", cur); err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				cur.nextTick()
			}
			stats, err := e.client.Stats(ctx, []string{"idx"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range e.events(t) {
				got = append(got, ev.ID)
			}
			slices.Sort(got)
			if !slices.Equal(got, ids) {
				t.Errorf("upserts %v, want each of %v once", got, ids)
			}
			for _, sc := range stats["idx"].Shards {
				if cp, _ := e.shardState(t, cur.uuid, sc.Shard); cp != sc.GlobalCheckpoint {
					t.Errorf("shard %d: checkpoint %d, want its gcp %d", sc.Shard, cp, sc.GlobalCheckpoint)
				}
			}
			if r.held != 0 {
				t.Errorf("%d hits still held", r.held)
			}
		})
	}
}

// TestRelay_Round_Refused: rounds that must fail, and write nothing.
func TestRelay_Round_Refused(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, e roundEnv, r *Relay, cur *cursor)
		index   string
		is      error
		wantErr string
	}{
		{name: "an index the feed never saw is missing", index: "nope", wantErr: "never seen an index of that name"},
		{name: "sequence numbers disabled", index: "noseq", setup: func(t *testing.T, e roundEnv, _ *Relay, _ *cursor) {
			e.do(t, http.MethodPut, "/noseq", `{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.disable_sequence_numbers":true}}`)
		}, is: ErrUnfollowable, wantErr: "index.disable_sequence_numbers"},
		{name: "a shard's history replaced", index: "idx", setup: func(t *testing.T, e roundEnv, r *Relay, cur *cursor) {
			e.create(t, "idx", 1)
			e.write(t, "idx", "a")
			if err := r.round(context.Background(), "idx", cur); err != nil {
				t.Fatal(err)
			}
			cur.nextTick()
			if err := r.round(context.Background(), "idx", cur); err != nil {
				t.Fatal(err)
			}
			if cur.histories[0] == "" {
				t.Fatal("setup: the feed recorded no history_uuid")
			}
			cur.histories[0] = "an-older-history"
		}, is: ErrHistoryReplaced, wantErr: "has a new history"},
		{name: "a closed index", index: "shut", setup: func(t *testing.T, e roundEnv, _ *Relay, _ *cursor) {
			e.create(t, "shut", 1)
			e.do(t, http.MethodPost, "/shut/_close", "")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRoundEnv(t, "refused")
			r := e.relay(t, []string{tt.index}, nil)
			cur := &cursor{target: tt.index}
			if tt.setup != nil {
				tt.setup(t, e, r, cur)
			}
			before := e.ops(t)
			err := r.round(context.Background(), tt.index, cur)
			switch {
			case err == nil:
				t.Fatal("round succeeded")
			case tt.is != nil && !errors.Is(err, tt.is):
				t.Errorf("round: %v, want an error wrapping %v", err, tt.is)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("round: %v, want it to say %q", err, tt.wantErr)
			case tt.wantErr == "" && tt.is == nil && !es.IsClosed(err):
				t.Errorf("round: %v, want the index closed", err)
			}
			if got := e.ops(t); !slices.Equal(got, before) {
				t.Errorf("the refused round wrote events %v (before: %v)", got, before)
			}
		})
	}
}

// TestRelay_Round_IndexLifecycle: an index followed from now, one deleted
// after it was followed, and one re-created under the same name.
func TestRelay_Round_IndexLifecycle(t *testing.T) {
	ctx := context.Background()
	// rounds runs n rounds on idx, each on a new tick.
	rounds := func(t *testing.T, r *Relay, cur *cursor, n int) {
		t.Helper()
		for i := range n {
			if err := r.round(ctx, "idx", cur); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			cur.nextTick()
		}
	}
	t.Run("from now: existing documents are skipped", func(t *testing.T) {
		e := newRoundEnv(t, "fromnow")
		e.create(t, "idx", 1)
		e.write(t, "idx", "old-1", "old-2")
		r := e.relay(t, []string{"idx"}, nil)
		cur := &cursor{target: "idx", fromNow: true}
		rounds(t, r, cur, 1)
		st := e.state(t)
		id := checkpoint.ShardID{IndexUUID: cur.uuid, Shard: 0}
		if st.Checkpoints[id] != 1 || st.Origins[id] != 1 {
			t.Errorf("checkpoint %d, origin %d; want both 1 (the gcp at adoption)", st.Checkpoints[id], st.Origins[id])
		}
		e.write(t, "idx", "new")
		rounds(t, r, cur, 2)
		if got, want := e.upserted(t), []string{"new@2"}; !slices.Equal(got, want) {
			t.Errorf("upserts %v, want %v", got, want)
		}
	})
	t.Run("deleted after it was followed: its end is emitted, its state dropped", func(t *testing.T) {
		e := newRoundEnv(t, "deleted")
		e.create(t, "idx", 1)
		e.write(t, "idx", "a", "b")
		r := e.relay(t, []string{"idx"}, nil)
		cur := &cursor{target: "idx"}
		rounds(t, r, cur, 2)
		uuid := cur.uuid
		e.do(t, http.MethodDelete, "/idx", "")
		rounds(t, r, cur, 1)
		if !cur.gone {
			t.Error("the cursor does not know the index is gone")
		}
		if got, want := e.ops(t), []string{"upsert a", "upsert b", "index_deleted"}; !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		st := e.state(t)
		if _, ok := st.Indices[uuid]; ok || len(st.Checkpoints) != 0 {
			t.Errorf("state after the end: indices %v, checkpoints %v; want the index's gone", st.Indices, st.Checkpoints)
		}
	})
	t.Run("re-created: the old one ends before the new one begins", func(t *testing.T) {
		e := newRoundEnv(t, "recreated")
		e.create(t, "idx", 1)
		e.write(t, "idx", "a")
		r := e.relay(t, []string{"idx"}, nil)
		cur := &cursor{target: "idx"}
		rounds(t, r, cur, 2)
		old := cur.uuid
		e.do(t, http.MethodDelete, "/idx", "")
		e.create(t, "idx", 1)
		e.write(t, "idx", "b")
		rounds(t, r, cur, 2)
		if cur.uuid == old || cur.uuid == "" {
			t.Fatalf("the cursor follows uuid %q, want the new index's (the old was %s)", cur.uuid, old)
		}
		if got, want := e.ops(t), []string{"upsert a", "index_deleted", "upsert b"}; !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		evs := e.events(t)
		if evs[1].IndexUUID != old || evs[2].IndexUUID != cur.uuid || evs[2].SeqNo != 0 {
			t.Errorf("events %+v: want the old uuid's end, then the new one's document at seq no 0", evs)
		}
		st := e.state(t)
		if _, ok := st.Indices[old]; ok {
			t.Error("the old index is still recorded")
		}
		if cp, _ := e.shardState(t, cur.uuid, 0); cp != 0 {
			t.Errorf("the new index's checkpoint = %d, want 0", cp)
		}
	})
}

// TestRelay_Round_ScansDeletes: a shard's delete scan runs in the round
// after its last page committed, before it is read further: a delete read
// past as a gap is found, emitted once with the checkpoint as its seq no,
// and the gap is cleared in Redis and in the cursor. A scan that aborts
// (the count fails) does not fail the round; the next round's scan finds
// the delete.
func TestRelay_Round_ScansDeletes(t *testing.T) {
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprintf("first scan aborted %v", abort), func(t *testing.T) {
			ctx := context.Background()
			e := newRoundEnv(t, "scans")
			e.create(t, "idx", 1)
			e.write(t, "idx", "a", "b", "c")
			scanner, err := deletes.New(deletes.Config{ES: e.client, Client: e.rdb, Keys: e.keys, Store: e.store,
				Interval: time.Nanosecond, DurableWait: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			r := e.relay(t, []string{"idx"}, func(c *Config) { c.Deletes = scanner })
			cur := &cursor{target: "idx"}
			round := func(what string) {
				t.Helper()
				if err := r.round(ctx, "idx", cur); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				cur.nextTick()
			}
			round("read a, b, c")
			round("settle them; the scanner's first sight of the shard")
			e.write(t, "idx", "-b")
			round("scan (gap proof), read the delete")
			if st := scanner.Stats(); st.Due != 1 || st.SavedByGap != 1 {
				t.Errorf("after the first scan: %+v, want one due, saved by the gap proof", st)
			}
			if abort {
				if err := e.emu.InjectFault(esemu.Fault{Kind: esemu.KindCount, Status: 503, Count: 1}); err != nil {
					t.Fatal(err)
				}
			}
			round("settle the delete's window (gap 1), then scan the shard")
			if abort {
				if st := scanner.Stats(); st.Aborted != 1 || st.Deletes != 0 {
					t.Errorf("after the aborted scan: %+v, want 1 aborted, no delete", st)
				}
				if cp, gap := e.shardState(t, cur.uuid, 0); cp != 3 || gap != 1 || cur.gaps[0] != 1 {
					t.Errorf("after the aborted scan: checkpoint %d, gap %d (cursor %d); want 3, 1, 1", cp, gap, cur.gaps[0])
				}
				round("scan again")
			}
			if got, want := e.ops(t), []string{"upsert a", "upsert b", "upsert c", "delete b"}; !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			if ev := e.events(t)[3]; ev.SeqNo != 3 || ev.IndexUUID != cur.uuid || ev.Target != "idx" {
				t.Errorf("delete event %+v: want seq no 3 (the checkpoint), uuid %s, target idx", ev, cur.uuid)
			}
			if cp, gap := e.shardState(t, cur.uuid, 0); cp != 3 || gap != 0 || cur.gaps[0] != 0 {
				t.Errorf("after the scan: checkpoint %d, gap %d (cursor %d); want 3, 0, 0", cp, gap, cur.gaps[0])
			}
			round("nothing more")
			if n := len(e.events(t)); n != 4 {
				t.Errorf("%d events after another round, want 4", n)
			}
		})
	}
}

func TestJoinDistinct(t *testing.T) {
	lost := fmt.Errorf("commit 50 events: %w", redisx.ErrLeaseLost)
	err := joinDistinct([]error{lost, nil, fmt.Errorf("commit 50 events: %w", redisx.ErrLeaseLost), errors.New("other")})
	if got, want := err.Error(), lost.Error()+"\nother"; got != want {
		t.Errorf("joinDistinct = %q, want %q", got, want)
	}
	if !errors.Is(err, redisx.ErrLeaseLost) {
		t.Error("joinDistinct lost the errors' chains")
	}
	if err := joinDistinct([]error{nil, nil}); err != nil {
		t.Errorf("joinDistinct(nils) = %v, want nil", err)
	}
}
