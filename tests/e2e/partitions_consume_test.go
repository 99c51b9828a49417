package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/status"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// The consumer side of a partitioned feed, without the relay side: the
// test writes what a relay with --partitions 3 writes (events in each
// partition's stream, the count in the feed-level meta) and runs the built
// binary's consume and status on it.

const (
	partUUID   = "uuid-orders"
	partShards = 6
)

// partSeeder appends document events to the partition streams of a feed,
// each to the partition of its shard, with per-shard rising seq nos.
type partSeeder struct {
	rdb        *redis.Client
	feed       string
	partitions int
	seq        [partShards]int64
	sent       int
}

// add appends rounds versions of docs documents: upserts, and in the last
// round a delete of every fifth document.
func (s *partSeeder) add(tb testing.TB, docs, rounds int, last bool) {
	tb.Helper()
	ctx := context.Background()
	pipe := s.rdb.Pipeline()
	for r := 0; r < rounds; r++ {
		for d := 0; d < docs; d++ {
			shard := d % partShards
			seq := s.seq[shard]
			s.seq[shard]++
			e := redisx.Event{Op: redisx.OpUpsert, Index: "orders", IndexUUID: partUUID, Shard: shard, ID: fmt.Sprintf("doc%d", d),
				SeqNo: seq, PrimaryTerm: 1, Version: seq + 1, Source: json.RawMessage(fmt.Sprintf(`{"d":%d,"seq":%d}`, d, seq))}
			if last && r == rounds-1 && d%5 == 0 {
				e.Op, e.Source, e.PrimaryTerm, e.Version = redisx.OpDelete, nil, 0, 0
			}
			keys := redisx.PartitionKeys(s.feed, redisx.Partition(partUUID, shard, s.partitions), s.partitions)
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Events(), Values: e.Values()})
			s.sent++
			if pipe.Len() >= 500 {
				if _, err := pipe.Exec(ctx); err != nil {
					tb.Fatal(err)
				}
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		tb.Fatal(err)
	}
}

// fileEvents reads the file sink's JSON lines.
func fileEvents(tb testing.TB, path string) []redisx.Event {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []redisx.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e redisx.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			tb.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// checkExactlyOnceInOrder fails unless the file holds each (shard, seq)
// of want events exactly once and each document's events in seq order.
func checkExactlyOnceInOrder(tb testing.TB, evs []redisx.Event, want int) {
	tb.Helper()
	seen := map[string]int{}
	last := map[string]int64{}
	var problems []string
	for _, e := range evs {
		k := fmt.Sprintf("%d/%d", e.Shard, e.SeqNo)
		seen[k]++
		if seen[k] == 2 {
			problems = append(problems, "applied twice: shard/seq "+k)
		}
		if p, ok := last[e.ID]; ok && e.SeqNo <= p {
			problems = append(problems, fmt.Sprintf("%s: seq %d applied after seq %d", e.ID, e.SeqNo, p))
		}
		last[e.ID] = e.SeqNo
	}
	if len(seen) != want {
		problems = append(problems, fmt.Sprintf("%d distinct events applied, want %d", len(seen), want))
	}
	if len(problems) > 10 {
		problems = append(problems[:10], "…")
	}
	if len(problems) > 0 {
		tb.Fatalf("the file sink's events (%d lines):\n%s", len(evs), strings.Join(problems, "\n"))
	}
}

func waitAllPartitionsDone(tb testing.TB, rdb *redis.Client, feed string, partitions int, group string) {
	tb.Helper()
	for _, k := range redisx.AllPartitionKeys(feed, partitions) {
		waitGroupDone(tb, rdb, k.Events(), group, 30*time.Second)
	}
}

// TestConsume_Partitions: consume reads every partition of a 3-partition
// feed (the count taken from the feed's record) with one group: every
// event applied exactly once, each document's events in order, the group
// acknowledged on every partition; a malformed entry is dead-lettered into
// its own partition's dead stream; SIGTERM in the middle of a backlog stops
// it with exit 0, and a restart finishes the rest without applying any
// event twice. A wrong --partitions is refused with the explanation.
func TestConsume_Partitions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const feed, P, group = "parts", 3, "g"
	fk := redisx.NewKeys(feed)
	if err := rdb.HSet(ctx, fk.Meta(), redisx.MetaPartitions, P).Err(); err != nil {
		t.Fatal(err)
	}
	seed := &partSeeder{rdb: rdb, feed: feed, partitions: P}
	seed.add(t, 120, 3, false)
	// A malformed entry in partition 1: dead-lettered there.
	badID, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: redisx.PartitionKeys(feed, 1, P).Events(), Values: []any{"op", "bogus"}}).Result()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("wrong count refused", func(t *testing.T) {
		before := keyspace(t, rdb)
		code, out := runBinary(t, 20*time.Second, "consume", "--redis", srv.URL(), "--feed", feed, "--group", group, "--partitions", "4", "--sink", "stdout")
		want := "feed parts has 3 partitions (escf:{parts}:meta partitions); you passed --partitions 4: pass --partitions 3, or start a new feed"
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("consume --partitions 4: exit %d, output:\n%s\nwant exit 1 and %q", code, out, want)
		}
		code, out = runBinary(t, 20*time.Second, "status", "--redis", srv.URL(), "--feed", feed, "--partitions", "1")
		if code != 1 || !strings.Contains(out, "pass --partitions 3") {
			t.Fatalf("status --partitions 1: exit %d, output:\n%s", code, out)
		}
		// The same from the environment.
		pe := startBinaryWithEnv(t, []string{"ESCF_PARTITIONS=4"}, "consume", "--redis", srv.URL(), "--feed", feed, "--group", group, "--sink", "stdout")
		if err := pe.cmd.Wait(); err == nil || !strings.Contains(pe.out.String(), want) {
			t.Fatalf("ESCF_PARTITIONS=4 consume: %v, output:\n%s\nwant %q", err, pe.out, want)
		}
		code, out = runBinary(t, 20*time.Second, "consume", "--redis", srv.URL(), "--feed", feed, "--group", group, "--partitions", "0")
		if code != 2 || !strings.Contains(out, "--partitions 0: want 1..1024") {
			t.Fatalf("consume --partitions 0: exit %d, output:\n%s", code, out)
		}
		if after := keyspace(t, rdb); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Fatalf("a refused consume changed the keyspace:\nbefore %v\nafter  %v", before, after)
		}
	})

	out := filepath.Join(t.TempDir(), "events.jsonl")
	args := []string{"consume", "--redis", srv.URL(), "--feed", feed, "--group", group, "--consumer", "c1",
		"--sink", "file", "--file-path", out, "--workers", "6", "--min-idle", "500ms", "--shutdown-timeout", "5s"}
	started := time.Now()
	p := startBinary(t, args...)
	// Without --partitions, consume reads the recorded count: a pool in
	// each of the 3 partitions' groups.
	waitConsumerReads(t, rdb, feed, P, group, "c1", started, 20*time.Second)
	waitAllPartitionsDone(t, rdb, feed, P, group)
	checkExactlyOnceInOrder(t, fileEvents(t, out), seed.sent)

	// Dead letters: the malformed entry in partition 1's dead stream only.
	for part, k := range redisx.AllPartitionKeys(feed, P) {
		dead, err := rdb.XRange(ctx, k.Dead(), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case part == 1 && (len(dead) != 1 || dead[0].Values["stream_id"] != badID):
			t.Errorf("partition 1's dead stream %s: %v, want the entry %s", k.Dead(), dead, badID)
		case part != 1 && len(dead) != 0:
			t.Errorf("partition %d's dead stream %s: %v, want none", part, k.Dead(), dead)
		}
	}
	if n := rdb.Exists(ctx, fk.Dead(), fk.Events()).Val(); n != 0 {
		t.Errorf("the feed-level stream or dead stream exists (%d): a partitioned consumer must not touch them", n)
	}

	// A backlog, and SIGTERM while it is being applied.
	before := seed.sent
	seed.add(t, 1000, 20, true)
	deadline := time.Now().Add(20 * time.Second)
	// SIGTERM as soon as the backlog is being applied (a loaded machine
	// applies 20,000 events quickly).
	for len(fileEvents(t, out)) <= before && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.out)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("consume did not exit within 15s of SIGTERM")
	}
	applied := len(fileEvents(t, out))
	t.Logf("applied %d of %d events before SIGTERM took effect", applied, seed.sent)

	// The restart (same consumer, --partitions given) applies the rest.
	started = time.Now()
	p2 := startBinary(t, append(args, "--partitions", "3")...)
	// Reading: its signal handler (set before anything talks to Redis) is.
	waitConsumerReads(t, rdb, feed, P, group, "c1", started, 20*time.Second)
	waitAllPartitionsDone(t, rdb, feed, P, group)
	stopGracefully(t, p2, "the restarted consumer")
	checkExactlyOnceInOrder(t, fileEvents(t, out), seed.sent)
	for _, k := range redisx.AllPartitionKeys(feed, P) {
		if pend := rdb.XPending(ctx, k.Events(), group).Val(); pend.Count != 0 {
			t.Errorf("%s: %d pending after the restart", k.Events(), pend.Count)
		}
	}
	if applied >= seed.sent {
		t.Errorf("SIGTERM came after the whole backlog was applied: the stop in the middle was not exercised")
	}

	t.Run("status", func(t *testing.T) {
		// What a relay of partitions 0 and 1 writes; partition 2 has no relay.
		for part, k := range redisx.AllPartitionKeys(feed, P) {
			rdb.HSet(ctx, k.Meta(), "created", "2026-12-01T00:00:00Z")
			rdb.HSet(ctx, k.Indices(), partUUID, `{"name":"orders","target":"orders","shards":6,"first_seen":"2026-12-01T00:00:00Z"}`)
			for sh := range partShards {
				if redisx.Partition(partUUID, sh, P) == part {
					rdb.HSet(ctx, k.Checkpoints(), redisx.CheckpointField(partUUID, sh), seed.seq[sh]-1)
				}
			}
			if part < 2 {
				rdb.Set(ctx, k.Lease(), fmt.Sprintf("relay-%d", part%2), time.Minute)
			}
		}
		// Relays register in escf:{feed}:relays with their expiry.
		rdb.ZAdd(ctx, "escf:{parts}:relays", redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "relay-0"},
			redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "relay-1"},
			redis.Z{Score: float64(time.Now().Add(-time.Minute).UnixMilli()), Member: "relay-dead"})
		code, js := runBinary(t, 20*time.Second, "status", "--redis", srv.URL(), "--feed", feed, "--json")
		if code != 1 {
			t.Fatalf("status with partition 2's lease free: exit %d, want 1:\n%s", code, js)
		}
		var rep status.PartitionedReport
		if err := json.Unmarshal([]byte(js[:strings.LastIndex(js, "}")+1]), &rep); err != nil {
			t.Fatalf("status --json: %v\n%s", err, js)
		}
		if rep.Partitions != P || len(rep.Partition) != P {
			t.Fatalf("status reports %d partitions (%d reports), want %d", rep.Partitions, len(rep.Partition), P)
		}
		var total int64
		for part, pr := range rep.Partition {
			k := redisx.PartitionKeys(feed, part, P)
			if got, want := pr.Stream.Length, rdb.XLen(ctx, k.Events()).Val(); got != want {
				t.Errorf("partition %d: stream length %d, want %d", part, got, want)
			}
			total += pr.Stream.Length
			if len(pr.Groups) != 1 || pr.Groups[0].Name != group || pr.Groups[0].Lag != 0 || pr.Groups[0].Pending != 0 {
				t.Errorf("partition %d: groups %+v, want %s with lag 0 and nothing pending", part, pr.Groups, group)
			}
			if got, want := pr.Lease.Held, part < 2; got != want {
				t.Errorf("partition %d: lease held %v, want %v", part, got, want)
			}
			var shards []int
			for _, ix := range pr.Indices {
				for _, sh := range ix.Shards {
					shards = append(shards, sh.Shard)
					if redisx.Partition(partUUID, sh.Shard, P) != part || sh.Checkpoint != seed.seq[sh.Shard]-1 {
						t.Errorf("partition %d lists shard %d (checkpoint %d)", part, sh.Shard, sh.Checkpoint)
					}
				}
			}
			if len(shards) != 2 {
				t.Errorf("partition %d lists shards %v, want its 2", part, shards)
			}
		}
		if rep.Totals.StreamLength != total || rep.Totals.DeadLetters != 1 || rep.Totals.LeasesHeld != 2 || len(rep.Totals.Holders) != 2 || rep.Totals.Shards != partShards {
			t.Errorf("totals %+v: want stream %d, 1 dead letter, 2 leases held by 2 relays, 6 shards", rep.Totals, total)
		}
		if len(rep.Totals.Groups) != 1 || rep.Totals.Groups[0].Partitions != P {
			t.Errorf("group totals %+v", rep.Totals.Groups)
		}
		if got := strings.Join(rep.Relays, ","); got != "relay-0,relay-1" {
			t.Errorf("relays %q, want the two live ones", got)
		}
		problems := strings.Join(rep.Problems, "\n")
		for _, want := range []string{"partition 2: no relay holds the lease", "partition 1: 1 events in the dead-letter stream escf:{parts:1}:dead"} {
			if !strings.Contains(problems, want) {
				t.Errorf("problems:\n%s\nwant %q", problems, want)
			}
		}

		// Text, and healthy once partition 2 has a relay and the dead
		// letter is dealt with.
		rdb.Set(ctx, redisx.PartitionKeys(feed, 2, P).Lease(), "relay-0", time.Minute)
		rdb.Del(ctx, redisx.PartitionKeys(feed, 1, P).Dead())
		code, text := runBinary(t, 20*time.Second, "status", "--redis", srv.URL(), "--feed", feed, "--partitions", "3")
		if code != 0 {
			t.Fatalf("status of a healthy partitioned feed: exit %d:\n%s", code, text)
		}
		for _, want := range []string{"feed parts: healthy, 3 partitions", "PARTITION", "3 of 3 held (2 relays)", "total (3 of 3)"} {
			if !strings.Contains(text, want) {
				t.Errorf("status text lacks %q:\n%s", want, text)
			}
		}
		t.Logf("status:\n%s", text)
	})

	t.Run("unpartitioned feed refuses partitions", func(t *testing.T) {
		old := redisx.NewKeys("old")
		rdb.HSet(ctx, old.Meta(), "created", "2026-12-01T00:00:00Z")
		code, out := runBinary(t, 20*time.Second, "consume", "--redis", srv.URL(), "--feed", "old", "--group", group, "--sink", "stdout", "--partitions", "3")
		if code != 1 || !strings.Contains(out, "feed old exists with one partition (escf:{old}:meta has no partitions field); you passed --partitions 3") {
			t.Fatalf("consume --partitions 3 of an unpartitioned feed: exit %d:\n%s", code, out)
		}
		if n := rdb.Exists(ctx, redisx.PartitionKeys("old", 0, 3).Events()).Val(); n != 0 {
			t.Fatal("the refused consume created a partition stream")
		}
	})
}

// waitConsumerReads waits until consumer is in group on each of the
// feed's partitions and has read there since since (XINFO CONSUMERS idle:
// the time since its last read attempt).
func waitConsumerReads(tb testing.TB, rdb *redis.Client, feed string, partitions int, group, consumer string, since time.Time, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for part, k := range redisx.AllPartitionKeys(feed, partitions) {
		for {
			read := false
			for _, c := range rdb.XInfoConsumers(context.Background(), k.Events(), group).Val() {
				read = read || c.Name == consumer && time.Now().Add(-c.Idle).After(since)
			}
			if read {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("consumer %s has not read partition %d (%s, group %s) within %s", consumer, part, k.Events(), group, timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestConsume_PartitionsReclaim: two consumers of one group on a
// 3-partition feed; one is SIGKILLed with events in hand on every
// partition; the other reclaims them (XAUTOCLAIM on each partition after
// --min-idle) and every event is applied at least once, nothing left
// pending.
func TestConsume_PartitionsReclaim(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const feed, P, group = "reclaim", 3, "g"
	if err := rdb.HSet(ctx, redisx.NewKeys(feed).Meta(), redisx.MetaPartitions, P).Err(); err != nil {
		t.Fatal(err)
	}
	seed := &partSeeder{rdb: rdb, feed: feed, partitions: P}
	seed.add(t, 1000, 20, true)
	dir := t.TempDir()
	start := func(name string) *proc {
		return startBinary(t, "consume", "--redis", srv.URL(), "--feed", feed, "--group", group, "--consumer", name,
			"--sink", "file", "--file-path", filepath.Join(dir, name+".jsonl"), "--workers", "3", "--prefetch", "300",
			"--min-idle", "500ms", "--shutdown-timeout", "5s")
	}
	c1 := start("c1")
	pendingOfC1 := func() map[int]int64 {
		held := map[int]int64{}
		for part, k := range redisx.AllPartitionKeys(feed, P) {
			cs, _ := rdb.XInfoConsumers(ctx, k.Events(), group).Result()
			for _, c := range cs {
				if c.Name == "c1" && c.Pending > 0 {
					held[part] = c.Pending
				}
			}
		}
		return held
	}
	// Kill it as soon as it holds events on every partition (a partition
	// with a small share may be done soon after).
	deadline := time.Now().Add(20 * time.Second)
	for len(pendingOfC1()) < P && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	c1.kill()
	held := pendingOfC1()
	t.Logf("c1 killed holding %v pending events by partition", held)
	if len(held) != P || held[0] == 0 || held[1] == 0 || held[2] == 0 {
		t.Fatalf("c1 held %v pending events by partition at its kill: want some on every partition", held)
	}
	c2 := start("c2")
	waitAllPartitionsDone(t, rdb, feed, P, group)
	stopGracefully(t, c2, "c2")
	for part, k := range redisx.AllPartitionKeys(feed, P) {
		cs, _ := rdb.XInfoConsumers(ctx, k.Events(), group).Result()
		for _, c := range cs {
			if c.Pending != 0 {
				t.Errorf("partition %d: consumer %s still has %d pending", part, c.Name, c.Pending)
			}
		}
	}
	applied := map[string]bool{}
	for _, name := range []string{"c1", "c2"} {
		for _, e := range fileEvents(t, filepath.Join(dir, name+".jsonl")) {
			applied[fmt.Sprintf("%d/%d", e.Shard, e.SeqNo)] = true
		}
	}
	if len(applied) != seed.sent {
		t.Fatalf("%d distinct events applied by c1 and c2, want %d", len(applied), seed.sent)
	}
	if !strings.Contains(c2.out.String(), "reclaimed=") || strings.Count(c2.out.String(), "reclaimed=0") == P {
		t.Errorf("c2 reclaimed nothing:\n%s", c2.out)
	}
}
