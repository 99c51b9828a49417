package redisx_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestFindFeed: a feed exists once a relay wrote its meta hash, its lease
// or an entry of its stream, in the feed-level keys or (when partitions are
// asked for) a partition's; a stream a consumer group made does not count.
// Looking writes nothing.
func TestFindFeed(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	p2 := redisx.PartitionKeys("parted", 2, 3)
	setup := func(t *testing.T, c *redis.Client) {
		t.Helper()
		for _, err := range []error{
			c.HSet(ctx, redisx.NewKeys("started").Meta(), "created", "2026-01-01T00:00:00Z").Err(),
			c.Set(ctx, redisx.NewKeys("leading").Lease(), "relay-1", time.Minute).Err(),
			c.XAdd(ctx, &redis.XAddArgs{Stream: redisx.NewKeys("lost").Events(), Values: []any{"op", "upsert"}}).Err(),
			c.XGroupCreateMkStream(ctx, redisx.NewKeys("grouped").Events(), "g", "0").Err(),
			c.HSet(ctx, p2.Meta(), "created", "2026-01-01T00:00:00Z").Err(),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
		// A stream that held entries and was trimmed to none.
		id := c.XAdd(ctx, &redis.XAddArgs{Stream: redisx.NewKeys("trimmed").Events(), Values: []any{"op", "upsert"}}).Val()
		c.XDel(ctx, redisx.NewKeys("trimmed").Events(), id)
	}
	setup(t, rdb)
	before := rdb.Keys(ctx, "*").Val()
	slices.Sort(before)

	tests := []struct {
		name       string
		feed       string
		partitions int
		evidence   string // "" for not found
		empty      string // the empty stream a not-found error names
	}{
		{name: "nothing", feed: "nosuchfeed"},
		{name: "relay started", feed: "started", evidence: redisx.NewKeys("started").Meta()},
		{name: "relay leads, not committed yet", feed: "leading", evidence: redisx.NewKeys("leading").Lease()},
		{name: "stream without its state", feed: "lost", evidence: redisx.NewKeys("lost").Events()},
		{name: "stream emptied", feed: "trimmed", evidence: redisx.NewKeys("trimmed").Events()},
		{name: "stream made by a group", feed: "grouped", empty: redisx.NewKeys("grouped").Events()},
		{name: "partition, counted when asked for", feed: "parted", partitions: 3, evidence: p2.Meta()},
		{name: "partition, not looked at for one partition", feed: "parted", partitions: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evidence, err := redisx.FindFeed(ctx, rdb, tt.feed, tt.partitions)
			var nf *redisx.FeedNotFoundError
			switch {
			case tt.evidence != "":
				if err != nil || evidence != tt.evidence {
					t.Fatalf("FindFeed = %q, %v; want %q", evidence, err, tt.evidence)
				}
			case !errors.As(err, &nf) || !errors.Is(err, redisx.ErrNoFeed):
				t.Fatalf("FindFeed = %q, %v; want a *FeedNotFoundError", evidence, err)
			case nf.Feed != tt.feed || nf.EmptyStream != tt.empty || nf.Partitions != max(tt.partitions, 1):
				t.Fatalf("FeedNotFoundError %+v; want feed %s, empty stream %q, partitions %d", nf, tt.feed, tt.empty, max(tt.partitions, 1))
			}
		})
	}
	after := rdb.Keys(ctx, "*").Val()
	slices.Sort(after)
	if !slices.Equal(before, after) {
		t.Fatalf("FindFeed changed the keyspace:\nbefore %v\nafter  %v", before, after)
	}
}

// TestListFeeds: the feeds of a Redis are the names of its meta hashes,
// partitions folded into their feed; a bound on SCAN calls reports an
// incomplete list.
func TestListFeeds(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	feeds, complete, err := redisx.ListFeeds(ctx, rdb, 0)
	if err != nil || len(feeds) != 0 || !complete {
		t.Fatalf("empty Redis: %v, %v, %v; want none, complete", feeds, complete, err)
	}
	for _, k := range []string{redisx.NewKeys("orders").Meta(), redisx.NewKeys("users").Meta(),
		redisx.PartitionKeys("parted", 0, 2).Meta(), redisx.PartitionKeys("parted", 1, 2).Meta(), redisx.NewKeys("parted").Meta()} {
		rdb.HSet(ctx, k, "created", "2026-01-01T00:00:00Z")
	}
	rdb.HSet(ctx, redisx.NewKeys("ghost").Checkpoints(), "u/0", "1") // no meta: not listed
	rdb.Set(ctx, "escf:{bad:x}:meta", "1", 0)                        // not a feed's key
	feeds, complete, err = redisx.ListFeeds(ctx, rdb, 0)
	if want := []string{"orders", "parted", "users"}; err != nil || !slices.Equal(feeds, want) || !complete {
		t.Fatalf("ListFeeds = %v, %v, %v; want %v, complete", feeds, complete, err, want)
	}
	// 5,000 other keys: one SCAN of COUNT 1000 cannot see them all.
	pipe := rdb.Pipeline()
	for i := range 5000 {
		pipe.Set(ctx, fmt.Sprintf("other:%d", i), "x", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, complete, err = redisx.ListFeeds(ctx, rdb, 1); err != nil || complete {
		t.Fatalf("ListFeeds with one SCAN over 5,000 keys: complete %v, %v; want incomplete", complete, err)
	}
}
