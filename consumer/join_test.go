package consumer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/consumer"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// groupOf reads group g of stream (ok false when it does not exist).
func groupOf(tb testing.TB, rdb *redis.Client, stream, g string) (redis.XInfoGroup, bool) {
	tb.Helper()
	gs, err := rdb.XInfoGroups(context.Background(), stream).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, x := range gs {
		if x.Name == g {
			return x, true
		}
	}
	return redis.XInfoGroup{}, false
}

func newJoinFeed(tb testing.TB, rdb *redis.Client, feed string, partitions int, pos redisx.Positions) *consumer.Feed {
	tb.Helper()
	f, err := consumer.New(consumer.Config{Client: rdb, Feed: feed, Partitions: partitions,
		Pool: consumer.PoolConfig{Group: "g", Logger: quiet, Positions: pos}})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestFeed_Join: the group join of a bootstrap, decided from the groups,
// pending lists and hashes in Redis.
func TestFeed_Join(t *testing.T) {
	ctx := context.Background()

	t.Run("a new group starts at the position recorded before the copy", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		keys := redisx.NewKeys("join-new")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0")
		pos := &memPositions{pos: map[string]redisx.Position{}}
		f := newJoinFeed(t, rdb, "join-new", 1, pos)
		err := f.Join(ctx, func(context.Context) error {
			// While the copy runs the relay goes on, and the group that
			// holds the position keeps those entries.
			if _, ok := groupOf(t, rdb, keys.Events(), redisx.HoldGroup("g")); !ok {
				t.Error("no holding group while the copy runs")
			}
			addAt(t, rdb, keys, "4000-0", "5000-0")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		g, ok := groupOf(t, rdb, keys.Events(), "g")
		if !ok || g.LastDeliveredID != "3000-0" || g.EntriesRead != 3 || g.Lag != 2 {
			t.Fatalf("group after Join: %+v (exists %v); want it at 3000-0 with 3 read and 2 left", g, ok)
		}
		if _, held := groupOf(t, rdb, keys.Events(), redisx.HoldGroup("g")); held {
			t.Error("the holding group is left after the Join")
		}
		if got := pos.pos[keys.Events()+"|g"]; got != (redisx.Position{Lead: "3000-0", Low: "3000-0"}) {
			t.Errorf("sink's position after Join %+v, want the recorded position", got)
		}
	})

	t.Run("a group that lost history is moved, its pending entries acknowledged, its loss forgotten", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		keys := redisx.NewKeys("join-lost")
		addAt(t, rdb, keys, "1000-0", "2000-0", "3000-0")
		if err := rdb.XGroupCreate(ctx, keys.Events(), "g", "0").Err(); err != nil {
			t.Fatal(err)
		}
		// Read, never acknowledged: pending.
		rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "old", Streams: []string{keys.Events(), ">"}, Count: 10, Block: -1})
		rdb.HSet(ctx, keys.Lost(), "g", "history lost: …")
		rdb.HSet(ctx, keys.Applied(), "g", "9000-0") // a lead of entries Redis lost
		pos := &memPositions{pos: map[string]redisx.Position{}}
		pos.set(keys.Events(), "g", redisx.Position{Lead: "9000-0"})
		f := newJoinFeed(t, rdb, "join-lost", 1, pos)
		if err := f.Join(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		g, _ := groupOf(t, rdb, keys.Events(), "g")
		if g.Pending != 0 || g.LastDeliveredID != "3000-0" {
			t.Errorf("group after Join: %d pending at %s; want 0 at 3000-0", g.Pending, g.LastDeliveredID)
		}
		if v, _ := redisx.RecordedLoss(ctx, rdb, keys, "g"); v != "" {
			t.Errorf("the loss is still recorded: %q", v)
		}
		if n, _ := rdb.HExists(ctx, keys.Applied(), "g").Result(); n {
			t.Error("the feed's copy of the sink's position is still there")
		}
		if got := pos.pos[keys.Events()+"|g"].Lead; got != "3000-0" {
			t.Errorf("sink's lead %q after Join, want 3000-0 (lowered from a lost entry)", got)
		}
	})

	t.Run("a copy that fails leaves the group as it was, and the next Join finishes", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		keys := redisx.NewKeys("join-fail")
		addAt(t, rdb, keys, "1000-0", "2000-0")
		if err := rdb.XGroupCreate(ctx, keys.Events(), "g", "1000-0").Err(); err != nil {
			t.Fatal(err)
		}
		f := newJoinFeed(t, rdb, "join-fail", 1, nil)
		boom := errors.New("copy failed")
		if err := f.Join(ctx, func(context.Context) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("Join = %v, want the copy's error", err)
		}
		if g, _ := groupOf(t, rdb, keys.Events(), "g"); g.LastDeliveredID != "1000-0" {
			t.Errorf("the group moved to %s although the copy failed", g.LastDeliveredID)
		}
		if _, held := groupOf(t, rdb, keys.Events(), redisx.HoldGroup("g")); !held {
			t.Error("the holding group went with the failed copy (it keeps the position for the next Join)")
		}
		addAt(t, rdb, keys, "3000-0")
		if err := f.Join(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if g, _ := groupOf(t, rdb, keys.Events(), "g"); g.LastDeliveredID != "3000-0" {
			t.Errorf("the second Join left the group at %s, want 3000-0", g.LastDeliveredID)
		}
		if _, held := groupOf(t, rdb, keys.Events(), redisx.HoldGroup("g")); held {
			t.Error("the holding group is left after the second Join")
		}
	})

	t.Run("every partition's stream is positioned", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		const P = 3
		for p, k := range redisx.AllPartitionKeys("join-parts", P) {
			ids := []string{"1000-0", "2000-0", "3000-0"}[:p+1]
			addAt(t, rdb, k, ids...)
		}
		f := newJoinFeed(t, rdb, "join-parts", P, nil)
		if err := f.Join(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		for p, k := range redisx.AllPartitionKeys("join-parts", P) {
			want := []string{"1000-0", "2000-0", "3000-0"}[p]
			if g, ok := groupOf(t, rdb, k.Events(), "g"); !ok || g.LastDeliveredID != want || g.Lag != 0 {
				t.Errorf("partition %d: group %+v, want it at %s with nothing left", p, g, want)
			}
		}
	})
}
