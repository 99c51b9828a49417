package redisx

// Whether a feed exists in a Redis, and which feeds a Redis holds (issue
// #23): consume and status refuse a feed no relay ever wrote to, instead
// of creating its stream and waiting for ever.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrNoFeed is wrapped by every *FeedNotFoundError.
var ErrNoFeed = errors.New("no such feed")

// FeedNotFoundError says that a Redis holds nothing a relay writes for a
// feed (FindFeed). Its message names no command-line flag: the CLI says
// what to check.
type FeedNotFoundError struct {
	Feed string
	// Partitions is the partition count looked for: above 1, the keys of
	// partitions 0..Partitions-1 were looked at too.
	Partitions int
	// EmptyStream is the feed's events stream when it exists but never
	// held an entry (a consumer group created it, not a relay); "" when
	// it does not exist.
	EmptyStream string
}

func (e *FeedNotFoundError) Error() string {
	k := NewKeys(e.Feed)
	msg := fmt.Sprintf("feed %q does not exist in this Redis: no relay has written to it (no %s, which a relay writes when it starts, no lease %s, no event in %s",
		e.Feed, k.Meta(), k.Lease(), k.Events())
	if e.Partitions > 1 {
		msg += fmt.Sprintf(", nor in the keys of its %d partitions, escf:{%s:<p>}:…", e.Partitions, e.Feed)
	}
	msg += ")"
	if e.EmptyStream != "" {
		msg += fmt.Sprintf("; %s exists but never held an entry: a consumer group created it, not a relay", e.EmptyStream)
	}
	return msg
}

func (e *FeedNotFoundError) Unwrap() error { return ErrNoFeed }

// feedKeysSeen is what FindFeed read of one set of a feed's keys (the
// feed-level ones, or one partition's).
type feedKeysSeen struct {
	keys Keys
	// meta and lease: the meta hash and the lease exist.
	meta, lease bool
	// stream: the events stream exists; lastID is its last-generated-id
	// ("0-0" for a stream that never held an entry).
	stream bool
	lastID string
}

// feedEvidence decides whether a feed exists from what was read of its key
// sets: the first key that shows a relay wrote to it (its meta hash, an
// events stream that held an entry, its lease), or "" and the first events
// stream that exists without ever having held an entry.
func feedEvidence(seen []feedKeysSeen) (evidence, emptyStream string) {
	for _, s := range seen {
		switch {
		case s.meta:
			return s.keys.Meta(), ""
		case s.stream && s.lastID != "" && s.lastID != "0-0":
			return s.keys.Events(), ""
		case s.lease:
			return s.keys.Lease(), ""
		}
	}
	for _, s := range seen {
		if s.stream {
			return "", s.keys.Events()
		}
	}
	return "", ""
}

// FindFeed reports whether the feed exists in rdb, and returns the key
// that shows it, or a *FeedNotFoundError. A feed exists once a relay has
// written to it, that is when one of these keys exists:
//
//   - its meta hash (Meta): every relay writes it as it starts (run
//     records when the feed was created and who leads in its first
//     commit, right after it took the lease; a relay with partitions > 1
//     records the partition count there before it takes any lease);
//   - an events stream that has held an entry (its last-generated-id is
//     above 0-0, however much was trimmed since): it stays when the
//     feed's state is lost, and consumers can still drain it;
//   - its lease (Lease): a relay leads it and is about to write the meta
//     hash.
//
// With partitions > 1 the same keys of each partition count too (a
// partitioned feed whose feed-level meta hash is gone). An events stream
// that never held an entry does not count: consumer groups create it
// (XGROUP CREATE … MKSTREAM), a relay never does.
//
// It writes nothing and reads with TYPE and XINFO STREAM, which every user
// of a feed may run (docs/SECURITY.md); partition keys are read only when
// partitions > 1.
func FindFeed(ctx context.Context, rdb redis.UniversalClient, feed string, partitions int) (string, error) {
	sets := []Keys{NewKeys(feed)}
	if partitions > 1 {
		sets = append(sets, AllPartitionKeys(feed, partitions)...)
	}
	type cmds struct {
		meta, lease *redis.StatusCmd
		info        *redis.XInfoStreamCmd
	}
	pipe := rdb.Pipeline()
	read := make([]cmds, len(sets))
	for i, k := range sets {
		read[i] = cmds{meta: pipe.Type(ctx, k.Meta()), lease: pipe.Type(ctx, k.Lease()), info: pipe.XInfoStream(ctx, k.Events())}
	}
	_, _ = pipe.Exec(ctx) // each command's error is looked at below
	seen := make([]feedKeysSeen, len(sets))
	for i, k := range sets {
		c := read[i]
		for _, t := range []*redis.StatusCmd{c.meta, c.lease} {
			if err := t.Err(); err != nil {
				return "", fmt.Errorf("look for feed %s: TYPE %s: %w", feed, t.Args()[1], err)
			}
		}
		s := feedKeysSeen{keys: k, meta: c.meta.Val() != "none", lease: c.lease.Val() != "none"}
		switch info, err := c.info.Result(); {
		case err == nil:
			s.stream, s.lastID = true, info.LastGeneratedID
		case !redis.HasErrorPrefix(err, "no such key"):
			return "", fmt.Errorf("look for feed %s: XINFO STREAM %s: %w", feed, k.Events(), err)
		}
		seen[i] = s
	}
	evidence, empty := feedEvidence(seen)
	if evidence == "" {
		return "", &FeedNotFoundError{Feed: feed, Partitions: max(partitions, 1), EmptyStream: empty}
	}
	return evidence, nil
}

// DefaultListFeedsScans bounds ListFeeds: SCAN calls per Redis node.
const DefaultListFeedsScans = 100

// feedsScanCount is the COUNT of each SCAN of ListFeeds.
const feedsScanCount = 1000

// ListFeeds lists the feeds rdb holds: the names of their meta hashes
// (escf:{<feed>}:meta, and escf:{<feed>:<p>}:meta of a partition), found
// with SCAN (MATCH escf:{*}:meta), sorted. It makes at most scans SCAN
// calls per node (0: DefaultListFeedsScans; about 1,000 keys looked at
// each), on every master of a Redis Cluster; complete is false when it
// stopped there with keys left unseen. It writes nothing; SCAN may be
// refused (NOPERM) to a user without +scan, which is returned.
func ListFeeds(ctx context.Context, rdb redis.UniversalClient, scans int) (feeds []string, complete bool, err error) {
	if scans <= 0 {
		scans = DefaultListFeedsScans
	}
	var mu sync.Mutex
	found := map[string]bool{}
	complete = true
	// scan looks at one node's keys; ForEachMaster runs one per master at once.
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for range scans {
			keys, next, err := c.Scan(ctx, cursor, metaScanPattern, feedsScanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				if f, ok := feedOfMeta(k); ok {
					found[f] = true
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
		mu.Lock()
		complete = false
		mu.Unlock()
		return nil
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, false, fmt.Errorf("list the feeds (SCAN MATCH %s): %w", metaScanPattern, err)
	}
	for f := range found {
		feeds = append(feeds, f)
	}
	slices.Sort(feeds)
	return feeds, complete, nil
}
