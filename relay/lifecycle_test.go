package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// runner is a Relay of its own lease and store on the env's feed (the
// env's lease released first), for tests of Run.
func (e roundEnv) runner(tb testing.TB, targets []string, mod func(*Config)) *Relay {
	tb.Helper()
	ctx := context.Background()
	if err := e.lease.Release(ctx); err != nil {
		tb.Fatal(err)
	}
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: e.rdb, Key: e.keys.Lease(), TTL: time.Second, Owner: "runner"})
	if err != nil {
		tb.Fatal(err)
	}
	store, err := checkpoint.New(checkpoint.Config{Client: e.rdb, Keys: e.keys, Lease: lease})
	if err != nil {
		tb.Fatal(err)
	}
	return e.relay(tb, targets, func(c *Config) {
		c.Store, c.Lease, c.PollInterval = store, lease, 20*time.Millisecond
		if mod != nil {
			mod(c)
		}
	})
}

// running is a Relay's Run in a goroutine, stopped when the test ends.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func run(tb testing.TB, r *Relay) *running {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(rn.done); rn.err = r.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-rn.done })
	return rn
}

// stop cancels Run and returns its error.
func (rn *running) stop() error {
	rn.cancel()
	<-rn.done
	return rn.err
}

// wait polls cond until it holds, failing after a generous deadline.
func wait(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRelay_Run_Lease: the relay leads only while it holds the lease: it
// waits as a standby while another holder has it, takes over when it is
// released, says who leads in the meta hash, and releases it when
// stopped. With ReturnOnLostLease it returns redisx.ErrLeaseLost instead
// of waiting, at start or when the lease moves while it leads.
func TestRelay_Run_Lease(t *testing.T) {
	ctx := context.Background()
	t.Run("standby, then leader, then released", func(t *testing.T) {
		e := newRoundEnv(t, "standby")
		e.create(t, "idx", 1)
		e.write(t, "idx", "a")
		r := e.runner(t, []string{"idx"}, nil)
		other, err := redisx.NewLease(redisx.LeaseConfig{Client: e.rdb, Key: e.keys.Lease(), TTL: time.Minute, Owner: "other"})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := other.TryAcquire(ctx); !ok || err != nil {
			t.Fatalf("the other holder's lease: %v %v", ok, err)
		}
		rn := run(t, r)
		// While the other holds the lease, the relay writes nothing.
		if r.Leading() || len(e.events(t)) != 0 {
			t.Fatalf("a standby leads (%v) or wrote %v", r.Leading(), e.ops(t))
		}
		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wait(t, "the standby leads and delivers", func() bool { return r.Leading() && len(e.upserted(t)) == 1 })
		meta, err := e.store.Meta(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if meta[checkpoint.MetaLeaseOwner] != r.cfg.Lease.Token() || meta[checkpoint.MetaCreated] == "" {
			t.Errorf("meta %v: want lease_owner %s and created set", meta, r.cfg.Lease.Token())
		}
		if err := rn.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if n, _ := e.rdb.Exists(ctx, e.keys.Lease()).Result(); n != 0 || r.Leading() {
			t.Errorf("after Run: lease key exists %v, leading %v; want released", n == 1, r.Leading())
		}
	})
	t.Run("ReturnOnLostLease: held by another at start", func(t *testing.T) {
		e := newRoundEnv(t, "taken")
		r := e.runner(t, []string{"idx"}, func(c *Config) { c.ReturnOnLostLease = true })
		if err := e.rdb.Set(ctx, e.keys.Lease(), "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.Run(ctx); !errors.Is(err, redisx.ErrLeaseLost) {
			t.Fatalf("Run: %v, want ErrLeaseLost", err)
		}
		if n, _ := e.rdb.Exists(ctx, e.keys.Meta()).Result(); n != 0 {
			t.Error("a relay without the lease wrote the meta hash")
		}
	})
	t.Run("ReturnOnLostLease: lost while leading", func(t *testing.T) {
		e := newRoundEnv(t, "lost")
		e.create(t, "idx", 1)
		r := e.runner(t, []string{"idx"}, func(c *Config) { c.ReturnOnLostLease = true })
		rn := run(t, r)
		wait(t, "the relay leads", r.Leading)
		if err := e.rdb.Set(ctx, e.keys.Lease(), "intruder", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-rn.done:
		case <-time.After(20 * time.Second):
			t.Fatal("Run went on after the lease moved")
		}
		if !errors.Is(rn.err, redisx.ErrLeaseLost) || r.Leading() {
			t.Fatalf("Run: %v, leading %v; want ErrLeaseLost, not leading", rn.err, r.Leading())
		}
		if tok, _ := e.rdb.Get(ctx, e.keys.Lease()).Result(); tok != "intruder" {
			t.Errorf("the lease is %q: the relay that lost it must leave the new holder's", tok)
		}
	})
}

// TestRelay_Run_Resync: a relay with Snapshot resets the feed's state
// (an old index's keys too), writes snapshot_start, every document once,
// snapshot_end with the counts, each shard's checkpoint at its gcp, and
// then follows the index as usual.
func TestRelay_Run_Resync(t *testing.T) {
	ctx := context.Background()
	e := newRoundEnv(t, "resync")
	e.create(t, "idx", 2)
	e.write(t, "idx", "a", "b", "c", "-c", "d")
	// Left by an earlier life of the feed: dropped by the reset.
	stale := checkpoint.ShardID{IndexUUID: "old-uuid", Shard: 0}
	if err := e.store.Commit(ctx, checkpoint.Batch{Checkpoints: map[checkpoint.ShardID]int64{stale: 9},
		Delivered: map[checkpoint.ShardID][]checkpoint.Doc{stale: {{ID: "x", SeqNo: 9}}}}); err != nil {
		t.Fatal(err)
	}
	var progress atomic.Int64
	r := e.runner(t, []string{"idx"}, func(c *Config) {
		c.Snapshot, c.BatchSize = true, 1
		c.SnapshotProgress = func(done, total int64) {
			if done <= total {
				progress.Store(done)
			}
		}
	})
	run(t, r)
	wait(t, "the snapshot is written", r.Snapshotted)
	ops := e.ops(t)
	if len(ops) != 5 || ops[0] != "snapshot_start" || ops[4] != "snapshot_end" {
		t.Fatalf("events %v: want snapshot_start, 3 upserts, snapshot_end", ops)
	}
	ups := slices.Sorted(slices.Values(ops[1:4]))
	if want := []string{"upsert a", "upsert b", "upsert d"}; !slices.Equal(ups, want) {
		t.Errorf("snapshot upserts %v, want %v", ups, want)
	}
	evs := e.events(t)
	if got := evs[4].Counts["idx"]; got != 3 {
		t.Errorf("snapshot_end counts %v, want idx: 3", evs[4].Counts)
	}
	if progress.Load() != 3 {
		t.Errorf("progress reported %d documents, want 3", progress.Load())
	}
	st := e.state(t)
	if _, ok := st.Checkpoints[stale]; ok {
		t.Error("the reset kept the old index's checkpoint")
	}
	stats, err := e.client.Stats(ctx, []string{"idx"})
	if err != nil {
		t.Fatal(err)
	}
	uuid := stats["idx"].UUID
	var delivered int64
	for _, sc := range stats["idx"].Shards {
		id := checkpoint.ShardID{IndexUUID: uuid, Shard: sc.Shard}
		if cp, ok := st.Checkpoints[id]; ok != (sc.GlobalCheckpoint >= 0) || (ok && cp != sc.GlobalCheckpoint) {
			t.Errorf("shard %d: checkpoint %d (recorded %v), want its gcp %d", sc.Shard, cp, ok, sc.GlobalCheckpoint)
		}
		_, n, err := checkpoint.RangeCounts(ctx, e.rdb, e.keys, id)
		if err != nil {
			t.Fatal(err)
		}
		delivered += n
	}
	if delivered != 3 {
		t.Errorf("%d documents recorded as delivered, want 3", delivered)
	}
	meta, err := e.store.Meta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if meta[checkpoint.MetaSnapshot] != "" {
		t.Errorf("meta %s = %q after the snapshot, want it cleared", checkpoint.MetaSnapshot, meta[checkpoint.MetaSnapshot])
	}
	// Then the index is followed from the snapshot's checkpoints.
	e.write(t, "idx", "e")
	wait(t, "the write after the snapshot is delivered", func() bool { return slices.Contains(e.ops(t), "upsert e") })
	if n := len(e.upserted(t)); n != 4 {
		t.Errorf("%d upserts, want the snapshot's 3 and e: %v", n, e.ops(t))
	}
}

// TestRelay_CheckTargets: the start-up side of the target policy.
func TestRelay_CheckTargets(t *testing.T) {
	tests := []struct {
		name    string
		targets []string
		// followed: an index of this name was recorded by the feed.
		followed string
		wantErr  string
	}{
		{name: "an index", targets: []string{"open"}},
		{name: "a typo", targets: []string{"opne"}, wantErr: `target "opne" names no index`},
		{name: "a missing index the feed followed", targets: []string{"gone"}, followed: "gone"},
		{name: "a pattern that matches nothing yet", targets: []string{"later-*"}},
		{name: "a closed index named explicitly", targets: []string{"shut"}, wantErr: "is closed, and a closed index cannot be read"},
		{name: "a closed index the feed followed", targets: []string{"shut"}, followed: "shut"},
		{name: "a closed index through a pattern", targets: []string{"sh*"}},
		{name: "sequence numbers disabled, named", targets: []string{"open", "noseq"}, wantErr: "has sequence numbers disabled"},
		{name: "sequence numbers disabled, through a pattern", targets: []string{"no*"}, wantErr: `exclude it (e.g. "no*,-noseq")`},
		{name: "excluded", targets: []string{"no*,-noseq", "open"}},
	}
	e := newRoundEnv(t, "check")
	e.create(t, "open", 1)
	e.create(t, "shut", 1)
	e.do(t, http.MethodPost, "/shut/_close", "")
	e.do(t, http.MethodPut, "/noseq", `{"settings":{"number_of_shards":1,"number_of_replicas":0,"index.disable_sequence_numbers":true}}`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			keys := redisx.NewKeys("check-" + strings.ReplaceAll(tt.name, " ", "-"))
			lease, err := redisx.NewLease(redisx.LeaseConfig{Client: e.rdb, Key: keys.Lease(), TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := lease.TryAcquire(ctx); !ok || err != nil {
				t.Fatalf("lease: %v %v", ok, err)
			}
			store, err := checkpoint.New(checkpoint.Config{Client: e.rdb, Keys: keys, Lease: lease})
			if err != nil {
				t.Fatal(err)
			}
			if tt.followed != "" {
				if err := store.Commit(ctx, checkpoint.Batch{Indices: map[string]checkpoint.IndexInfo{"uuid-" + tt.followed: {Name: tt.followed, Target: tt.targets[0], Shards: 1}}}); err != nil {
					t.Fatal(err)
				}
			}
			before, err := e.rdb.DBSize(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			r := e.relay(t, tt.targets, func(c *Config) { c.Store, c.Lease = store, lease })
			err = r.checkTargets(ctx)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("checkTargets: %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("checkTargets: %v, want an error saying %q", err, tt.wantErr)
			case tt.wantErr != "" && !errors.As(err, new(*TargetError)):
				t.Errorf("checkTargets: %v (%T), want a *TargetError for main to explain", err, err)
			}
			if after, _ := e.rdb.DBSize(ctx).Result(); after != before {
				t.Errorf("checkTargets wrote to Redis: %d keys, then %d", before, after)
			}
		})
	}
}

func TestConfig_Validate(t *testing.T) {
	base := Config{ES: &es.Client{}, Store: &checkpoint.Store{}, Lease: &redisx.Lease{}, Targets: []string{"a"}}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{name: "minimal", mod: func(*Config) {}},
		{name: "no ES", mod: func(c *Config) { c.ES = nil }, wantErr: "ES is nil"},
		{name: "no Store", mod: func(c *Config) { c.Store = nil }, wantErr: "Store is nil"},
		{name: "no Lease", mod: func(c *Config) { c.Lease = nil }, wantErr: "Lease is nil"},
		{name: "no targets", mod: func(c *Config) { c.Targets = nil }, wantErr: "no Targets"},
		{name: "negative poll", mod: func(c *Config) { c.PollInterval = -time.Second }, wantErr: "PollInterval = -1s"},
		{name: "read concurrency at the bound", mod: func(c *Config) { c.ReadConcurrency = MaxReadConcurrency }},
		{name: "read concurrency", mod: func(c *Config) { c.ReadConcurrency = MaxReadConcurrency + 1 },
			wantErr: fmt.Sprintf("ReadConcurrency = %d: want 1..%d", MaxReadConcurrency+1, MaxReadConcurrency)},
		{name: "batch size at the bound", mod: func(c *Config) { c.BatchSize = MaxBatchSize }},
		{name: "batch size", mod: func(c *Config) { c.BatchSize = MaxBatchSize + 1 },
			wantErr: fmt.Sprintf("BatchSize = %d: want 1..%d", MaxBatchSize+1, MaxBatchSize)},
		{name: "from", mod: func(c *Config) { c.From = "later" }, wantErr: `From = "later"`},
		{name: "from now", mod: func(c *Config) { c.From = FromNow }},
		{name: "backoff", mod: func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Second, time.Millisecond }, wantErr: "backoff 1s..1ms"},
		{name: "empty target", mod: func(c *Config) { c.Targets = []string{"a", ""} }, wantErr: "a target expression is empty"},
		{name: "target twice", mod: func(c *Config) { c.Targets = []string{"a", "b", "a"} }, wantErr: `target "a" is named twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			checkValidate(t, c.Validate(), tt.wantErr)
		})
	}
}

// TestErrorKind: errors of the same kind are logged once in a row.
func TestErrorKind(t *testing.T) {
	esErr := func(status int, typ string) error {
		return &es.Error{Op: "search", Status: status, Type: typ}
	}
	root := errors.New("connection refused")
	tests := []struct {
		name string
		a, b error
		same bool
	}{
		{"same ES status and type", esErr(503, "unavailable"), esErr(503, "unavailable"), true},
		{"another ES status", esErr(503, "x"), esErr(429, "x"), false},
		{"one root cause, wrapped differently", fmt.Errorf("commit: %w", root), fmt.Errorf("stats: %w", fmt.Errorf("dial: %w", root)), true},
		{"other causes", errors.New("a"), errors.New("b"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorKind(tt.a) == errorKind(tt.b); got != tt.same {
				t.Errorf("errorKind(%v) == errorKind(%v): %v, want %v", tt.a, tt.b, got, tt.same)
			}
		})
	}
}

// TestRelay_Start_RepairsLostCommits: Redis lost the relay's last commits
// (an older append-only file, a lagging replica): at the next start the
// documents they delivered are recorded again with a gap on their shard,
// so a delete scan looks at them; commits older than the store remembers
// make the feed's state lost instead (a resync rebuilds it).
func TestRelay_Start_RepairsLostCommits(t *testing.T) {
	tests := []struct {
		name    string
		memory  time.Duration // the store's RollbackMemory (0: its default)
		wantErr error
	}{
		{name: "lost commits are recorded again for delete scans"},
		{name: "lost commits older than the store remembers", memory: time.Nanosecond, wantErr: checkpoint.ErrStateLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e := newRoundEnv(t, "repair")
			store, err := checkpoint.New(checkpoint.Config{Client: e.rdb, Keys: e.keys, Lease: e.lease, RollbackMemory: tt.memory})
			if err != nil {
				t.Fatal(err)
			}
			e.store = store
			e.create(t, "idx", 1)
			e.write(t, "idx", "a", "b")
			r := e.relay(t, []string{"idx"}, nil)
			if err := r.start(ctx); err != nil {
				t.Fatalf("first start: %v", err)
			}
			cur := &cursor{target: "idx"}
			for range 2 {
				if err := r.round(ctx, "idx", cur); err != nil {
					t.Fatal(err)
				}
				cur.nextTick()
			}
			// One more commit: with a memory of 1ns, the page's commit is
			// forgotten by then (a round trip to Redis takes longer).
			if err := store.Commit(ctx, checkpoint.Batch{Meta: map[string]string{"note": "after the page"}}); err != nil {
				t.Fatal(err)
			}
			// Redis loses the page's commit and the one after it.
			n, err := e.rdb.HGet(ctx, e.keys.Meta(), checkpoint.MetaCommits).Int64()
			if err != nil {
				t.Fatal(err)
			}
			lost, _ := e.rdb.Keys(ctx, "escf:{repair}:dlv*").Result()
			if len(lost) == 0 {
				t.Fatal("setup: no delivered keys to lose")
			}
			e.rdb.Del(ctx, append(lost, e.keys.Events())...)
			e.rdb.HDel(ctx, e.keys.Checkpoints(), redisx.CheckpointField(cur.uuid, 0))
			e.rdb.HSet(ctx, e.keys.Meta(), checkpoint.MetaCommits, n-2)

			err = r.start(ctx)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), "resync") {
					t.Fatalf("start: %v, want %v advising a resync", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("start after the loss: %v", err)
			}
			id := checkpoint.ShardID{IndexUUID: cur.uuid, Shard: 0}
			docs, err := checkpoint.ReadDelivered(ctx, e.rdb, e.keys, id)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, fmt.Sprintf("%s@%d", d.ID, d.SeqNo))
			}
			slices.Sort(got)
			if want := []string{"a@0", "b@1"}; !slices.Equal(got, want) {
				t.Errorf("delivered after the repair %v, want %v", got, want)
			}
			st := e.state(t)
			if _, ok := st.Checkpoints[id]; ok || st.Gaps[id] != 1 {
				t.Errorf("after the repair: checkpoint recorded %v, gap %d; want no checkpoint (read again) and gap 1", ok, st.Gaps[id])
			}
			if r.lost.Commits != 0 {
				t.Errorf("the relay still remembers %d lost commits", r.lost.Commits)
			}
			// Consumers that applied the lost entries find the repair
			// recorded: it covers them (the stream was emptied: any id).
			v, _ := e.rdb.HGet(ctx, e.keys.Meta(), redisx.RollbacksField).Result()
			rbs, err := redisx.ParseRollbacks(v)
			if err != nil || len(rbs) != 1 || rbs[0].Commits != 2 || !rbs[0].Covers(strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)+"-0") {
				t.Errorf("meta %s = %q (%v): want one record of 2 lost commits covering the last second", redisx.RollbacksField, v, err)
			}
		})
	}
}
