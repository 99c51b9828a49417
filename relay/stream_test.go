package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

func TestStreamIDs(t *testing.T) {
	tests := []struct {
		a, b string
		less bool
	}{
		{"1-0", "1-1", true},
		{"1-9", "2-0", true},
		{"10-0", "9-99", false},
		{"5-5", "5-5", false},
		{"1700000000000-3", "1700000000000-12", true},
	}
	for _, tt := range tests {
		if got := lessID(tt.a, tt.b); got != tt.less {
			t.Errorf("lessID(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.less)
		}
	}
	for in, want := range map[string]string{"0-0": "0-1", "1700000000000-12": "1700000000000-13", "garbage": "0-0"} {
		if got := nextID(in); got != want {
			t.Errorf("nextID(%s) = %s, want %s", in, got, want)
		}
	}
}

// A feed with no stream yet has no groups: not an error (trim and
// backpressure ask before the first commit).
func TestGroups_NoStreamYet(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	keys := redisx.NewKeys("nostream")
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Second, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{cfg: Config{Store: store}}
	gs, err := r.groups(context.Background())
	if err != nil || len(gs) != 0 {
		t.Fatalf("groups of a feed without a stream = %v, %v; want none and no error", gs, err)
	}
}

// A group that read the last entry has nothing unread, whatever lag Redis
// reports: after a failover Redis 7.0 reports a stale one (made here with
// XGROUP SETID … ENTRIESREAD 0), and a relay paused on it would never
// resume, since it writes nothing new for the group to read.
func TestGroups_StaleLagOfAGroupThatReadEverything(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	keys := redisx.NewKeys("stalelag")
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: time.Second, Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	stream := keys.Events()
	for i := 0; i < 50; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"op", "upsert"}})
	}
	rdb.XGroupCreate(ctx, stream, "done", "$")
	rdb.XGroupCreate(ctx, stream, "behind", "0")
	if err := rdb.Do(ctx, "XGROUP", "SETID", stream, "done", "$", "ENTRIESREAD", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if g := rdb.XInfoGroups(ctx, stream).Val(); len(g) != 2 || g[1].Lag != 50 {
		t.Fatalf("the setup did not make Redis report a stale lag: %+v", g)
	}
	r := &Relay{cfg: Config{Store: store}}
	gs, err := r.groups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lags := map[string]int64{}
	for _, g := range gs {
		lags[g.name] = g.lag
	}
	if lags["done"] != 0 || lags["behind"] != 50 {
		t.Fatalf("lags %v: want done 0 (it read the last entry), behind 50", lags)
	}
}

// streamIDs are ten stream ids: five written two hours ago, five a second
// ago.
func streamIDs() []string {
	old, recent := time.Now().Add(-2*time.Hour).UnixMilli(), time.Now().Add(-time.Second).UnixMilli()
	var ids []string
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("%d-%d", old, i+1))
	}
	for i := range 5 {
		ids = append(ids, fmt.Sprintf("%d-%d", recent, i+1))
	}
	return ids
}

// TestRelay_Trim: the stream is cut below the oldest entry some group
// still needs (its oldest pending entry, or its last delivered one), never
// below MinRetention; without groups only past MaxStreamLen.
func TestRelay_Trim(t *testing.T) {
	ids := streamIDs()
	tests := []struct {
		name         string
		maxLen       int64
		minRetention time.Duration
		// groups: name -> the index in ids of its last delivered entry
		// (0: none read); pending: name -> the index of an entry it read
		// and left pending before moving on.
		groups  map[string]int
		pending map[string]int
		keep    int // the entries left: the last keep of ids
	}{
		{name: "no groups, within MaxStreamLen", maxLen: 20, keep: 10},
		{name: "no groups, past MaxStreamLen", maxLen: 4, keep: 4},
		{name: "no groups, past MaxStreamLen, MinRetention keeps the young", maxLen: 4, minRetention: time.Hour, keep: 5},
		{name: "below the slowest group's last delivered entry", maxLen: 4, groups: map[string]int{"fast": 7, "slow": 4}, keep: 6},
		{name: "a pending entry holds the trim back", maxLen: 4, groups: map[string]int{"a": 8}, pending: map[string]int{"a": 1}, keep: 9},
		{name: "MinRetention keeps entries every group acknowledged", maxLen: 4, minRetention: time.Hour, groups: map[string]int{"a": 9}, keep: 5},
		{name: "a group that read nothing keeps everything", maxLen: 4, groups: map[string]int{"new": 0}, keep: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e := newRoundEnv(t, "trim")
			stream := e.keys.Events()
			for _, id := range ids {
				if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"op", "upsert"}}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for g, at := range tt.groups {
				start := "0"
				if at > 0 {
					start = ids[at]
				}
				if p, ok := tt.pending[g]; ok {
					start = ids[p-1]
				}
				if err := e.rdb.XGroupCreate(ctx, stream, g, start).Err(); err != nil {
					t.Fatal(err)
				}
				if _, ok := tt.pending[g]; ok {
					if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: g, Consumer: "c", Streams: []string{stream, ">"}, Count: 1}).Err(); err != nil {
						t.Fatal(err)
					}
					if err := e.rdb.XGroupSetID(ctx, stream, g, ids[at]).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			r := e.relay(t, []string{"idx"}, func(c *Config) { c.Trim, c.MaxStreamLen, c.MinRetention = true, tt.maxLen, tt.minRetention })
			groups, err := r.groups(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.trim(ctx, groups); err != nil {
				t.Fatalf("trim: %v", err)
			}
			msgs, err := e.rdb.XRange(ctx, stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range msgs {
				got = append(got, m.ID)
			}
			if want := ids[len(ids)-tt.keep:]; !slices.Equal(got, want) {
				t.Errorf("entries left %v, want %v", got, want)
			}
			if got, want := metric(t, r, "escf_stream_trimmed_entries_total"), float64(len(ids)-tt.keep); got != want {
				t.Errorf("escf_stream_trimmed_entries_total = %g, want %g", got, want)
			}
		})
	}
}

// TestRelay_Backpressure: reading pauses while the slowest group lags by
// more than MaxBacklog and resumes at or below it; each change is in the
// meta hash and the gauge.
func TestRelay_Backpressure(t *testing.T) {
	ctx := context.Background()
	e := newRoundEnv(t, "backpressure")
	r := e.relay(t, []string{"idx"}, func(c *Config) { c.MaxBacklog = 10 })
	steps := []struct {
		name   string
		lags   []int64
		paused bool
	}{
		{"no group", nil, false},
		{"within the backlog", []int64{3, 10}, false},
		{"one group past it", []int64{3, 11}, true},
		{"still past it", []int64{50}, true},
		{"caught up to the limit", []int64{10, 0}, false},
	}
	for _, st := range steps {
		var groups []groupState
		for i, lag := range st.lags {
			groups = append(groups, groupState{name: fmt.Sprintf("g%d", i), lag: lag})
		}
		r.backpressure(ctx, groups)
		if got := r.Paused(); got != st.paused {
			t.Errorf("%s: paused %v, want %v", st.name, got, st.paused)
		}
		if got, want := metric(t, r, "escf_backpressure"), map[bool]float64{true: 1}[st.paused]; got != want {
			t.Errorf("%s: escf_backpressure = %g, want %g", st.name, got, want)
		}
		meta, err := e.store.Meta(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if since := meta[checkpoint.MetaBackpressure]; (since != "") != st.paused {
			t.Errorf("%s: meta %s = %q, want it set only while paused", st.name, checkpoint.MetaBackpressure, since)
		}
	}
}

// TestRelay_WatchStream: the watcher pauses the relay on a lagging group
// and trims what every group acknowledged.
func TestRelay_WatchStream(t *testing.T) {
	ctx := context.Background()
	e := newRoundEnv(t, "watch")
	stream := e.keys.Events()
	ids := streamIDs()
	for _, id := range ids {
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"op", "upsert"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.rdb.XGroupCreate(ctx, stream, "slow", ids[2]).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.relay(t, []string{"idx"}, func(c *Config) {
		c.MaxBacklog, c.Trim, c.TrimInterval, c.PollInterval = 5, true, 10*time.Millisecond, 10*time.Millisecond
	})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.watchStream(wctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := e.rdb.XLen(ctx, stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		if r.Paused() && n == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("paused %v, %d entries left; want paused (7 unread > 5) and 8 left (trimmed below the group's last delivered entry)", r.Paused(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := metric(t, r, "escf_stream_trimmed_entries_total"); got != 2 {
		t.Errorf("escf_stream_trimmed_entries_total = %g, want 2", got)
	}
	// Stopped watching, whether between reads or in one: nobody pauses.
	cancel()
	<-done
	stopped = true
	if r.Paused() || metric(t, r, "escf_backpressure") != 0 {
		t.Errorf("after the watch stopped: paused %v, escf_backpressure %g; want neither", r.Paused(), metric(t, r, "escf_backpressure"))
	}
}
