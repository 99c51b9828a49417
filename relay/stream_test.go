package relay

import (
	"context"
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
