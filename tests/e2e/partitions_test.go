package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// leaseOwners reads every partition's lease: partition -> the holding
// process (the owner name before the token's random part; "" when free).
func leaseOwners(tb testing.TB, rdb *redis.Client, feed string, parts int) []string {
	tb.Helper()
	out := make([]string, parts)
	for p := range out {
		v, err := rdb.Get(context.Background(), redisx.PartitionKeys(feed, p, parts).Lease()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			tb.Fatal(err)
		}
		out[p], _, _ = strings.Cut(v, "/")
	}
	return out
}

// countOwners counts the partitions each process holds ("" counts the free
// ones).
func countOwners(owners []string) map[string]int {
	n := map[string]int{}
	for _, o := range owners {
		n[o]++
	}
	return n
}

// partitionsCaughtUp is caughtUp over every partition's checkpoints.
func partitionsCaughtUp(tb testing.TB, c backend, rdb *redis.Client, feed string, parts int, indices []string) string {
	merged := checkpoint.State{Checkpoints: map[checkpoint.ShardID]int64{}}
	for _, k := range redisx.AllPartitionKeys(feed, parts) {
		st, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: k})
		if err != nil {
			tb.Fatal(err)
		}
		s, err := st.Load(context.Background())
		if err != nil {
			return err.Error()
		}
		for id, cp := range s.Checkpoints {
			merged.Checkpoints[id] = cp
		}
	}
	for _, ix := range indices {
		uuid := indexUUID(tb, c, ix)
		for n, ss := range inspect(c).shards(tb, ix) {
			if ss.gcp != ss.max {
				return fmt.Sprintf("%s/%d: gcp %d behind max seq no %d", ix, n, ss.gcp, ss.max)
			}
			cp, ok := merged.Checkpoints[checkpoint.ShardID{IndexUUID: uuid, Shard: n}]
			if ss.gcp >= 0 && (!ok || cp != ss.gcp) {
				return fmt.Sprintf("%s/%d (partition %d): checkpoint %d (stored %v), gcp %d", ix, n, redisx.Partition(uuid, n, parts), cp, ok, ss.gcp)
			}
		}
	}
	return ""
}

func partitionStreams(feed string, parts int) []string {
	var out []string
	for _, k := range redisx.AllPartitionKeys(feed, parts) {
		out = append(out, k.Events())
	}
	return out
}

// TestPartitions_ThreeRelaysSIGKILL: a feed of P = 6 partitions run by 3
// relay processes with --deletes while 4 writers index, update and delete;
// one relay is SIGKILLed mid-run. While 3 relays live, each holds at most
// ceil(6/3) = 2 partitions (leases read from Redis); the killed one's are
// taken over within 2×TTL; every partition's stream carries only its
// shards' events, and the merged streams replay to exactly the index.
func TestPartitions_ThreeRelaysSIGKILL(t *testing.T) {
	const feedName, parts = "parts", 6
	ttl := time.Second
	c := esCluster(t, esemu.Config{Nodes: 3, OutOfOrder: true})
	ix := c.Index("parts")
	createIndex(t, c, ix, 6, 1)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	stopWriters := startWriters(t, c, ix, 4, 7, true, false)
	args := relayArgs(c, srv.URL(), feedName, ix, "--deletes", "--delete-scan-interval", "30ms", "--delete-scan-budget", "1",
		"--partitions", "6", "--lease-ttl", ttl.String())
	procs := []*proc{startBinary(t, args...), startBinary(t, args...), startBinary(t, args...)}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range procs {
				t.Logf("relay %d:\n%s", i, tail(p.out.String(), 40))
			}
		}
	})
	names := make([]string, len(procs))
	for i, p := range procs {
		names[i] = fmt.Sprintf("-%d", p.cmd.Process.Pid) // ownerName() is <host>-<pid>
	}
	owner := func(o string) int {
		for i, n := range names {
			if o != "" && strings.HasSuffix(o, n) {
				return i
			}
		}
		return -1
	}

	// Balanced: 2 + 2 + 2, all 6 held.
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := countOwners(leaseOwners(t, rdb, feedName, parts))
		balanced := n[""] == 0 && len(n) == 3
		for o, k := range n {
			balanced = balanced && owner(o) >= 0 && k == 2
		}
		if balanced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 relays did not settle on 2 partitions each: %v\n%s", n, procs[0].out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Steady while 3 live: nobody above ceil(6/3) = 2.
	samples := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); samples++ {
		for o, k := range countOwners(leaseOwners(t, rdb, feedName, parts)) {
			if o != "" && k > 2 {
				t.Fatalf("relay %s holds %d partitions while 3 relays live (want at most ceil(6/3) = 2)", o, k)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}

	// SIGKILL one relay; the other two take its partitions within 2×TTL, on
	// Redis's clock (where the leases expire), from a reading taken after
	// the kill.
	victim := procs[1]
	victim.kill()
	killed := redisNow(t, rdb)
	var leaseKeys []string
	for p := range parts {
		leaseKeys = append(leaseKeys, redisx.PartitionKeys(feedName, p, parts).Lease())
	}
	took := waitTakeover(t, rdb, leaseKeys, killed, 2*ttl, func(values []string) bool {
		for _, v := range values {
			o, _, _ := strings.Cut(v, "/")
			if i := owner(o); i < 0 || i == 1 {
				return false
			}
		}
		return true
	})
	t.Logf("takeover of the killed relay's partitions after %s (TTL %s)", took.Round(time.Millisecond), ttl)
	for o, k := range countOwners(leaseOwners(t, rdb, feedName, parts)) {
		if k > 3 {
			t.Errorf("relay %s holds %d partitions with 2 relays alive (want at most 3)", o, k)
		}
	}

	time.Sleep(time.Second) // writes after the takeover
	waitDeleteEvent(t, rdb, partitionStreams(feedName, parts), 30*time.Second)
	ws := stopWriters()
	ops, _ := writerOps(ws)
	deadline = time.Now().Add(30 * time.Second)
	for why := "?"; why != ""; {
		if why = partitionsCaughtUp(t, c, rdb, feedName, parts, []string{ix}); why != "" && time.Now().After(deadline) {
			t.Fatalf("the partitions did not catch up: %s", why)
		}
		time.Sleep(50 * time.Millisecond)
	}
	a := auditStreams(t, c, rdb, partitionStreams(feedName, parts), []string{ix}, ws, 30*time.Second)
	if a.Deletes == 0 {
		t.Error("no delete event: the scenario did not exercise delete scans")
	}

	// Each partition's stream carries only its shards; the index's
	// generation is feed-level.
	uuid := indexUUID(t, c, ix)
	used := map[int]bool{}
	for p, s := range partitionStreams(feedName, parts) {
		for _, e := range entries(t, rdb, s) {
			if e.IndexUUID == "" {
				continue
			}
			if got := redisx.Partition(e.IndexUUID, e.Shard, parts); got != p {
				t.Fatalf("partition %d's stream has an event of shard %d (partition %d): %+v", p, e.Shard, got, e)
			}
			used[p] = true
		}
	}
	if g, err := rdb.HGet(context.Background(), redisx.NewKeys(feedName).Generations(), uuid).Result(); err != nil || g != "1" {
		t.Errorf("feed-level generation of %s: %q, %v; want 1", uuid, g, err)
	}
	if n, _ := rdb.Exists(context.Background(), redisx.PartitionKeys(feedName, 0, parts).Generations()).Result(); n != 0 {
		t.Error("a partition has its own generations hash; with partitions they are feed-level")
	}
	for i, p := range procs {
		if i != 1 {
			p.kill()
		}
	}
	var ps []int
	for p := range used {
		ps = append(ps, p)
	}
	sort.Ints(ps)
	record(t, figure{Scenario: "P=6, 3 relays, one SIGKILLed, 4 writers, --deletes", Faults: 1, Entries: a.Entries, Docs: a.Docs,
		Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes; %d delete events; partitions with events %v; takeover %s (TTL %s)", ops, a.Deletes, ps, took.Round(time.Millisecond), ttl)})
}

// TestPartitions_CountIsFixed: a feed started with --partitions 6 refuses
// --partitions 4 (exit 1, saying what to pass); an unpartitioned feed
// refuses --partitions 3; so does resync; --partitions out of 1..1024 is a
// usage error.
func TestPartitions_CountIsFixed(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	fixed := c.Index("fixed")
	createIndex(t, c, fixed, 2, 0)
	mustDo(t, "PUT", c.URL()+"/"+fixed+"/_doc/1", `{"a":1}`)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()

	p := startBinary(t, relayArgs(c, srv.URL(), "six", fixed, "--partitions", "6")...)
	deadline := time.Now().Add(10 * time.Second)
	for countOwners(leaseOwners(t, rdb, "six", 6))[""] != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not take its 6 partitions:\n%s", p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	if got, _ := rdb.HGet(ctx, "escf:{six}:meta", "partitions").Result(); got != "6" {
		t.Fatalf("escf:{six}:meta partitions = %q, want 6", got)
	}
	code, out := runBinary(t, 20*time.Second, relayArgs(c, srv.URL(), "six", fixed, "--partitions", "4")...)
	if code != 1 || !strings.Contains(out, "feed six has 6 partitions (escf:{six}:meta partitions); you passed --partitions 4: pass --partitions 6") {
		t.Fatalf("restart with --partitions 4: exit %d, want 1 with the explanation:\n%s", code, out)
	}
	code, out = runBinary(t, 20*time.Second, relayArgs(c, srv.URL(), "six", fixed)...)
	if code != 1 || !strings.Contains(out, "pass --partitions 6") {
		t.Fatalf("restart without --partitions: exit %d, want 1 with the explanation:\n%s", code, out)
	}

	// An unpartitioned feed.
	p = startBinary(t, relayArgs(c, srv.URL(), "one", fixed)...)
	deadline = time.Now().Add(10 * time.Second)
	for n, _ := rdb.Exists(ctx, "escf:{one}:meta").Result(); n == 0; n, _ = rdb.Exists(ctx, "escf:{one}:meta").Result() {
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not start the feed:\n%s", p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.kill()
	code, out = runBinary(t, 20*time.Second, relayArgs(c, srv.URL(), "one", fixed, "--partitions", "3")...)
	if code != 1 || !strings.Contains(out, "feed one exists with one partition") || !strings.Contains(out, "you passed --partitions 3") {
		t.Fatalf("unpartitioned feed then --partitions 3: exit %d, want 1 with the explanation:\n%s", code, out)
	}
	if ok, _ := rdb.HExists(ctx, "escf:{one}:meta", "partitions").Result(); ok {
		t.Error("the refused run recorded a partition count")
	}
	for _, k := range keyspace(t, rdb) {
		if strings.HasPrefix(k, "escf:{one:") {
			t.Errorf("the refused run wrote %s", k)
		}
	}

	resync := append([]string{"resync"}, relayArgs(c, srv.URL(), "six", fixed, "--partitions", "4")[1:]...)
	code, out = runBinary(t, 20*time.Second, resync...)
	if code != 1 || !strings.Contains(out, "pass --partitions 6") {
		t.Fatalf("resync --partitions 4 of a 6-partition feed: exit %d, want 1 with the explanation:\n%s", code, out)
	}
	for _, bad := range []string{"0", "1025", "-3"} {
		code, out = runBinary(t, 20*time.Second, relayArgs(c, srv.URL(), "bad", fixed, "--partitions", bad)...)
		if code != 2 || !strings.Contains(out, "--partitions "+bad+": want 1..1024") {
			t.Errorf("--partitions %s: exit %d, want 2 naming the flag:\n%s", bad, code, out)
		}
	}
}

// TestPartitions_IndexGone: a deleted index of a feed with 3 partitions
// ends with one index_deleted event, in the partition of its shard 0 (no
// --deletes), or with a delete per delivered document, each in its shard's
// partition (--deletes); every partition drops the index's state.
func TestPartitions_IndexGone(t *testing.T) {
	const parts = 3
	c := esCluster(t, esemu.Config{})
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{name: "index_deleted", extra: nil},
		{name: "per-document", extra: []string{"--deletes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed := "gone-" + strings.ReplaceAll(tc.name, "_", "-")
			ix := c.Index(feed)
			createIndex(t, c, ix, 4, 0)
			const docs = 40
			for i := range docs {
				mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), ix, i), `{"n":1}`)
			}
			uuid := indexUUID(t, c, ix)
			p := startBinary(t, relayArgs(c, srv.URL(), feed, ix+"*", append([]string{"--partitions", "3"}, tc.extra...)...)...)
			deadline := time.Now().Add(20 * time.Second)
			for why := "?"; why != ""; {
				if why = partitionsCaughtUp(t, c, rdb, feed, parts, []string{ix}); why != "" && time.Now().After(deadline) {
					t.Fatalf("not caught up: %s\n%s", why, p.out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			mustDo(t, "DELETE", c.URL()+"/"+ix, "")
			deadline = time.Now().Add(20 * time.Second)
			for {
				left := 0
				for _, k := range redisx.AllPartitionKeys(feed, parts) {
					if ok, _ := rdb.HExists(ctx, k.Indices(), uuid).Result(); ok {
						left++
					}
				}
				if left == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d partitions still record the deleted index:\n%s", left, p.out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			p.kill()
			ends, deletes := map[int]int{}, 0
			for q, s := range partitionStreams(feed, parts) {
				for _, e := range entries(t, rdb, s) {
					switch e.Op {
					case redisx.OpIndexDeleted:
						ends[q]++
					case redisx.OpDelete:
						deletes++
						if got := redisx.Partition(e.IndexUUID, e.Shard, parts); got != q {
							t.Errorf("delete of shard %d in partition %d's stream, want %d", e.Shard, q, got)
						}
					}
				}
				cps, _ := rdb.HGetAll(ctx, redisx.PartitionKeys(feed, q, parts).Checkpoints()).Result()
				for f := range cps {
					if strings.HasPrefix(f, uuid+"/") {
						t.Errorf("partition %d keeps %s of the deleted index", q, f)
					}
				}
			}
			if want := redisx.Partition(uuid, 0, parts); len(ends) != 1 || ends[want] != 1 {
				t.Fatalf("index_deleted events by partition %v, want exactly one, in partition %d (shard 0's)", ends, want)
			}
			if tc.extra != nil && deletes != docs {
				t.Fatalf("%d deletes, want %d (one per document, then the index_deleted)", deletes, docs)
			}
		})
	}
}

// TestPartitions_RelayReturnsOnLostLease: with ReturnOnLostLease (how a
// partition manager runs its relays) a relay does not wait as a standby:
// it returns ErrLeaseLost when the lease is taken, and when it loses it
// while leading.
func TestPartitions_RelayReturnsOnLostLease(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	lost := c.Index("lost")
	createIndex(t, c, lost, 1, 0)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	managed := func(cfg *relay.Config) { cfg.ReturnOnLostLease = true }
	result := func(f *feed, within time.Duration) error {
		t.Helper()
		select {
		case err := <-f.done:
			f.done <- err // for halt
			return err
		case <-time.After(within):
			t.Fatalf("Run did not return within %s", within)
			return nil
		}
	}

	key := redisx.NewKeys("lost-held").Lease()
	rdb.Set(ctx, key, "someone-else", 5*time.Second)
	f := startRelay(t, c, srv.URL(), "lost-held", []string{lost}, managed)
	if err := result(f, 2*time.Second); !errors.Is(err, redisx.ErrLeaseLost) {
		t.Fatalf("lease held by another: Run = %v, want ErrLeaseLost at once", err)
	}

	f = startRelay(t, c, srv.URL(), "lost-lead", []string{lost}, managed)
	waitHolder(t, rdb.Get, f.keys.Lease(), "", 5*time.Second)
	rdb.Set(ctx, f.keys.Lease(), "thief", 5*time.Second)
	if err := result(f, 3*time.Second); !errors.Is(err, redisx.ErrLeaseLost) {
		t.Fatalf("lease stolen while leading: Run = %v, want ErrLeaseLost", err)
	}
}

// TestPartitions_Generations: with 3 partitions following a re-created
// index, every partition assigns generations in the feed-level hash, once
// per uuid: the first index is 1, the re-created one 2, whatever the number
// of partitions that saw them.
func TestPartitions_Generations(t *testing.T) {
	const feed, parts = "regen", 3
	c := esCluster(t, esemu.Config{})
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	regen := c.Index("regen")
	createIndex(t, c, regen, 4, 0)
	for i := range 20 {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), regen, i), `{"n":1}`)
	}
	old := indexUUID(t, c, regen)
	p := startBinary(t, relayArgs(c, srv.URL(), feed, regen+"*", "--partitions", "3")...)
	waitUp := func() {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for why := "?"; why != ""; {
			if why = partitionsCaughtUp(t, c, rdb, feed, parts, []string{regen}); why != "" && time.Now().After(deadline) {
				t.Fatalf("not caught up: %s\n%s", why, p.out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitUp()
	mustDo(t, "DELETE", c.URL()+"/"+regen, "")
	createIndex(t, c, regen, 4, 0)
	for i := range 20 {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/%d", c.URL(), regen, i), `{"n":2}`)
	}
	recreated := indexUUID(t, c, regen)
	waitUp()
	p.kill()
	got, err := rdb.HGetAll(ctx, redisx.NewKeys(feed).Generations()).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{old: "1", recreated: "2", "name:" + regen: "2"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("feed-level generations %v, want %v", got, want)
			break
		}
	}
	for _, k := range redisx.AllPartitionKeys(feed, parts) {
		if n, _ := rdb.Exists(ctx, k.Generations()).Result(); n != 0 {
			t.Errorf("%s exists: with partitions, generations are feed-level only", k.Generations())
		}
	}
}

// TestPartitions_Resync: resync --partitions 3 of a feed a relay ran
// rebuilds every partition: each partition's stream gets snapshot_start,
// the documents of its shards (each document once over all partitions) and
// snapshot_end with its counts; then the process follows as a partition
// manager (new documents flow).
func TestPartitions_Resync(t *testing.T) {
	const feed, parts = "rs", 3
	c := esCluster(t, esemu.Config{})
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rs := c.Index("rs")
	createIndex(t, c, rs, 4, 0)
	// The writes go through a writer: on a real cluster the audit judges
	// the stream by their acknowledgements.
	w := &writer{index: rs}
	if !onEmulator(c) {
		w.acks = newAckLog()
	}
	const docs = 30
	for i := range docs {
		id := fmt.Sprint(i)
		w.do(t, "PUT", fmt.Sprintf("%s/%s/_doc/%s", c.URL(), rs, id), `{"n":1}`, id)
	}
	waitUp := func(p *proc) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for why := "?"; why != ""; {
			if why = partitionsCaughtUp(t, c, rdb, feed, parts, []string{rs}); why != "" && time.Now().After(deadline) {
				t.Fatalf("not caught up: %s\n%s", why, p.out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	p := startBinary(t, relayArgs(c, srv.URL(), feed, rs, "--partitions", "3")...)
	waitUp(p)
	p.kill()
	before := map[int]int{}
	for q, s := range partitionStreams(feed, parts) {
		before[q] = len(entries(t, rdb, s))
	}

	args := append([]string{"resync"}, relayArgs(c, srv.URL(), feed, rs, "--partitions", "3")[1:]...)
	p = startBinary(t, args...)
	// The resync's snapshot is written when every partition's stream holds
	// its snapshot_end.
	snapshotEnded := func() bool {
		for q, s := range partitionStreams(feed, parts) {
			ended := false
			for _, e := range entries(t, rdb, s)[before[q]:] {
				ended = ended || e.Op == redisx.OpSnapshotEnd
			}
			if !ended {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(20 * time.Second); !snapshotEnded(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("resync wrote no snapshot_end in every partition within 20s:\n%s", p.out)
		}
	}
	w.do(t, "PUT", c.URL()+"/"+rs+"/_doc/after", `{"n":2}`, "after")
	waitUp(p)
	p.kill()

	seen := map[string]int{}
	var counted int64
	for q, s := range partitionStreams(feed, parts) {
		evs := entries(t, rdb, s)[before[q]:]
		if len(evs) < 2 || evs[0].Op != redisx.OpSnapshotStart {
			t.Fatalf("partition %d: the resync's events do not begin with snapshot_start: %+v", q, evs)
		}
		ended := false
		for _, e := range evs[1:] {
			switch {
			case e.Op == redisx.OpSnapshotEnd:
				ended = true
				counted += e.Counts[rs]
			case e.Op == redisx.OpUpsert && !ended:
				seen[e.ID]++
				if got := redisx.Partition(e.IndexUUID, e.Shard, parts); got != q {
					t.Errorf("partition %d's snapshot has shard %d (partition %d)", q, e.Shard, got)
				}
			}
		}
		if !ended {
			t.Errorf("partition %d: no snapshot_end", q)
		}
		meta, _ := rdb.HGetAll(ctx, redisx.PartitionKeys(feed, q, parts).Meta()).Result()
		if meta["snapshot_in_progress"] != "" {
			t.Errorf("partition %d: snapshot still in progress after the resync: %v", q, meta)
		}
	}
	if len(seen) != docs || counted != docs {
		t.Errorf("snapshots hold %d documents (counts say %d), want %d", len(seen), counted, docs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("document %s is in the snapshots %d times", id, n)
		}
	}
	// The snapshot repeats upserts the first run delivered (audit counts
	// them as duplicates, as for any resync); nothing may be lost or wrong.
	a := auditStreams(t, c, rdb, partitionStreams(feed, parts), []string{rs}, []*writer{w}, 10*time.Second)
	if a.Lost+a.Wrong != 0 {
		t.Errorf("after the resync the streams replay wrongly: %+v", a)
	}
}

// TestPartitions_Metrics: a partition manager serves one registry with the
// per-partition collectors labelled partition="<p>", and /readyz says which
// partitions it holds.
func TestPartitions_Metrics(t *testing.T) {
	c := esCluster(t, esemu.Config{})
	pm := c.Index("pm")
	createIndex(t, c, pm, 2, 0)
	mustDo(t, "PUT", c.URL()+"/"+pm+"/_doc/1", `{}`)
	srv := redistest.Start(t)
	addr := closedPort(t)
	p := startBinary(t, relayArgs(c, srv.URL(), "pm", pm, "--partitions", "3", "--deletes", "--metrics-addr", addr)...)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := []string{`escf_lease_held{partition="0"} 1`, `escf_lease_held{partition="2"} 1`, `escf_stream_entries{feed="pm",partition="1"}`,
		`escf_commits_total{partition="0"}`, `escf_rounds_total{partition="1"}`}
	var code int
	var body string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		code, body = get("/metrics")
		ok := code == http.StatusOK
		for _, w := range want {
			ok = ok && strings.Contains(body, w)
		}
		if ok {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s\n%s", code, body, p.out)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	if code, body := get("/readyz"); code != http.StatusOK || !strings.Contains(body, "holding partitions [0 1 2] of 3") {
		t.Errorf("/readyz: %d %q", code, body)
	}
}
