package redisx_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// groupRig is a stream of 50 entries on a real Redis.
func groupRig(t *testing.T) (redis.UniversalClient, string, []string) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	stream := redisx.NewKeys("groups").Events()
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []any{"op", "upsert", "n", i}}).Val()
	}
	return rdb, stream, ids
}

// read has group g read n entries (created at 0 if missing) and acknowledges
// the first acked of them.
func read(t *testing.T, rdb redis.UniversalClient, stream, g string, n, acked int) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.XGroupCreate(ctx, stream, g, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.Fatal(err)
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: g, Consumer: "c", Streams: []string{stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res[0].Messages[:acked] {
		rdb.XAck(ctx, stream, g, m.ID)
	}
}

func state(t *testing.T, rdb redis.UniversalClient, stream, g string) (redisx.StreamState, redisx.GroupState) {
	t.Helper()
	st, gs, ok, err := redisx.ReadGroup(context.Background(), rdb, stream, g)
	if err != nil || !ok {
		t.Fatalf("ReadGroup %s: ok %v, %v", g, ok, err)
	}
	return st, gs
}

// The case: a group read 10 of 50, then XTRIM MAXLEN 20: 20 entries
// it never read are gone, 20 are left to read.
func TestGroups_TrimmedPastTheGroup(t *testing.T) {
	rdb, stream, _ := groupRig(t)
	read(t, rdb, stream, "g1", 10, 10)
	read(t, rdb, stream, "done", 50, 50)
	rdb.XTrimMaxLen(context.Background(), stream, 20)
	st, g := state(t, rdb, stream, "g1")
	if g.Lag != 20 || g.LostUnread != 20 || g.LostPending != 0 || g.Lost() != 20 || !g.HistoryLost() {
		t.Fatalf("group g1 after the trim: %+v; want lag 20, 20 lost", g)
	}
	if _, d := state(t, rdb, stream, "done"); d.HistoryLost() || d.Lag != 0 {
		t.Fatalf("the group that read everything: %+v; want nothing lost, lag 0", d)
	}
	if st.Complete() {
		t.Fatalf("stream %+v reported complete after a trim", st)
	}
	err := error(&redisx.HistoryLostError{Stream: stream, State: st, Group: g})
	if !errors.Is(err, redisx.ErrHistoryLost) || !strings.Contains(err.Error(), `"g1"`) || !strings.Contains(err.Error(), "20 entries") || !strings.Contains(err.Error(), "with a bootstrap") {
		t.Fatalf("error %q: want the group, the count and the bootstrap named", err)
	}
}

// Pending entries whose payload was trimmed are lost too, and so is an
// unread entry removed with XDEL.
func TestGroups_PendingTrimmedAndUnreadDeleted(t *testing.T) {
	rdb, stream, ids := groupRig(t)
	ctx := context.Background()
	read(t, rdb, stream, "p", 30, 25) // 5 pending: entries 25..29
	rdb.XTrimMinID(ctx, stream, ids[28])
	if _, g := state(t, rdb, stream, "p"); g.LostPending != 3 || g.FirstLostPending != ids[25] || g.LostUnread != 0 || g.Lag != 20 {
		t.Fatalf("group p: %+v; want 3 pending lost from %s, nothing unread lost, lag 20", g, ids[25])
	}
	rdb.XDel(ctx, stream, ids[40])
	if _, g := state(t, rdb, stream, "p"); g.LostUnread != 1 || g.Lag != 19 || g.Lost() != 4 {
		t.Fatalf("group p after XDEL of an unread entry: %+v; want 1 unread lost, lag 19, 4 lost", g)
	}
	rdb.XDel(ctx, stream, ids[29]) // a pending one still in the stream's range
	if _, g := state(t, rdb, stream, "p"); g.LostPending != 4 {
		t.Fatalf("group p after XDEL of a pending entry: %+v; want 4 pending lost", g)
	}
}

// Trimming what every group read loses nothing, even when the trim removes
// a group's last delivered entry; a group that read the last entry has
// nothing lost or unread even when Redis's counters disagree (Redis 7.0
// after a failover, made here with SETID … ENTRIESREAD 0).
func TestGroups_NothingLost(t *testing.T) {
	rdb, stream, ids := groupRig(t)
	ctx := context.Background()
	read(t, rdb, stream, "a", 30, 30)
	rdb.XTrimMinID(ctx, stream, ids[29]) // the relay's safe trim keeps the last delivered entry
	if _, g := state(t, rdb, stream, "a"); g.HistoryLost() || g.Lag != 20 {
		t.Fatalf("after a trim up to the last delivered entry: %+v; want nothing lost, lag 20", g)
	}
	rdb.XTrimMinID(ctx, stream, ids[30])
	if _, g := state(t, rdb, stream, "a"); g.HistoryLost() || g.Lag != 20 {
		t.Fatalf("after a trim past the last delivered entry: %+v; want nothing lost, lag 20", g)
	}
	read(t, rdb, stream, "a", 20, 20)
	if err := rdb.Do(ctx, "XGROUP", "SETID", stream, "a", "$", "ENTRIESREAD", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if _, g := state(t, rdb, stream, "a"); g.HistoryLost() || g.Lag != 0 {
		t.Fatalf("a group at the last entry with stale counters: %+v; want nothing lost, lag 0", g)
	}
}

// A stream that was never trimmed is complete; a missing one too.
func TestGroups_Complete(t *testing.T) {
	rdb, stream, _ := groupRig(t)
	ctx := context.Background()
	st, err := redisx.ReadStream(ctx, rdb, stream)
	if err != nil || !st.Complete() || st.EntriesAdded != 50 {
		t.Fatalf("untrimmed stream: %+v, %v; want complete, 50 added", st, err)
	}
	st, err = redisx.ReadStream(ctx, rdb, "escf:{none}:events")
	if err != nil || !st.Complete() {
		t.Fatalf("missing stream: %+v, %v; want complete", st, err)
	}
}
