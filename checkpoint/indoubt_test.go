package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// doubtRig is a Store that reaches Redis through a proxy that can lose a
// transaction's request or its reply, and a client of its own that reaches
// Redis directly.
type doubtRig struct {
	srv   *redistest.Server
	proxy *redistest.Proxy
	st    *checkpoint.Store
	rdb   *redis.Client // direct
	keys  redisx.Keys
	sh    checkpoint.ShardID
}

func newDoubtRig(tb testing.TB, args ...string) *doubtRig {
	tb.Helper()
	srv := redistest.Start(tb, redistest.Options{Args: args})
	proxy := redistest.StartProxy(tb, srv.Addr)
	client, err := redisx.NewClient(proxy.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	keys := redisx.NewKeys("doubt")
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: client, Key: keys.Lease(), TTL: time.Hour, Owner: "test"})
	if err != nil {
		tb.Fatal(err)
	}
	if ok, err := lease.TryAcquire(context.Background()); !ok || err != nil {
		tb.Fatalf("acquire: %v %v", ok, err)
	}
	st, err := checkpoint.New(checkpoint.Config{Client: client, Keys: keys, Lease: lease})
	if err != nil {
		tb.Fatal(err)
	}
	return &doubtRig{srv: srv, proxy: proxy, st: st, rdb: srv.Client(tb), keys: keys, sh: checkpoint.ShardID{IndexUUID: "U", Shard: 0}}
}

// batch delivers documents ids at seq nos from seq on, and moves the
// shard's checkpoint past them.
func (r *doubtRig) batch(seq int64, ids ...string) checkpoint.Batch {
	b := checkpoint.Batch{Checkpoints: map[checkpoint.ShardID]int64{}, Delivered: map[checkpoint.ShardID][]checkpoint.Doc{}}
	for i, id := range ids {
		s := seq + int64(i)
		b.Events = append(b.Events, upsert(r.sh.IndexUUID, r.sh.Shard, id, s))
		b.Delivered[r.sh] = append(b.Delivered[r.sh], checkpoint.Doc{ID: id, SeqNo: s})
		b.Checkpoints[r.sh] = s
	}
	return b
}

// streamIDs are the document ids of the stream's entries, in order.
func (r *doubtRig) streamIDs(tb testing.TB) []string {
	tb.Helper()
	msgs, err := r.rdb.XRange(context.Background(), r.keys.Events(), "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, m.Values["id"].(string))
	}
	return out
}

func (r *doubtRig) checkpoint(tb testing.TB) string {
	tb.Helper()
	v, _ := r.rdb.HGet(context.Background(), r.keys.Checkpoints(), r.sh.String()).Result()
	return v
}

// aofSize is the size of the server's incr AOF file.
func (r *doubtRig) aofSize(tb testing.TB) (string, int64) {
	tb.Helper()
	incr, err := filepath.Glob(filepath.Join(r.srv.AOFDir(), "*.incr.aof"))
	if err != nil || len(incr) != 1 {
		tb.Fatalf("want one incr AOF file in %s, got %v (%v)", r.srv.AOFDir(), incr, err)
	}
	fi, err := os.Stat(incr[0])
	if err != nil {
		tb.Fatal(err)
	}
	return incr[0], fi.Size()
}

// powerCut kills Redis and starts it again on its AOF cut back to size
// bytes: the writes after that point are lost, as a power failure loses
// what was not fsynced.
func (r *doubtRig) powerCut(tb testing.TB, file string, size int64) {
	tb.Helper()
	r.srv.Stop()
	if err := os.Truncate(file, size); err != nil {
		tb.Fatal(err)
	}
	r.srv.StartAgain()
}

// TestStore_CommitInDoubt: a commit whose request or reply the connection
// lost is ErrInDoubt, and the Store decides it before it loads or commits
// anything else, by the token the commit wrote: a landed commit is neither
// written again nor forgotten (a later rollback across it reports its
// documents), one that did not land is written again once, and one Redis
// lost together with earlier commits is reported as possibly delivered.
func TestStore_CommitInDoubt(t *testing.T) {
	ctx := context.Background()

	t.Run("reply lost, commit landed", func(t *testing.T) {
		r := newDoubtRig(t)
		if err := r.st.Commit(ctx, r.batch(0, "a")); err != nil {
			t.Fatal(err)
		}
		r.proxy.DropNextExecReply()
		err := r.st.Commit(ctx, r.batch(1, "b", "c"))
		if !errors.Is(err, checkpoint.ErrInDoubt) || r.proxy.Executed() != 1 {
			t.Fatalf("commit whose reply was lost: %v (executed %d), want ErrInDoubt", err, r.proxy.Executed())
		}
		if n := r.st.InDoubt(); n != 1 {
			t.Fatalf("InDoubt = %d, want 1", n)
		}
		if _, err := r.st.Load(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := r.streamIDs(t), []string{"a", "b", "c"}; !slices.Equal(got, want) || r.st.InDoubt() != 0 {
			t.Fatalf("after Load: stream %v, in doubt %d; want %v (the landed commit once), 0", got, r.st.InDoubt(), want)
		}
		// Redis goes back to its first commit: the landed commit in doubt
		// is among what Rebase reports, documents and all.
		if err := r.rdb.HSet(ctx, r.keys.Meta(), checkpoint.MetaCommits, 1).Err(); err != nil {
			t.Fatal(err)
		}
		rb, err := r.st.Rebase(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := docIDs(rb.Delivered[r.sh]); rb.Commits != 1 || !slices.Equal(got, []string{"b", "c"}) {
			t.Fatalf("Rebase = %d commits lost delivering %v; want 1 delivering [b c]", rb.Commits, got)
		}
	})

	t.Run("request lost, commit not landed", func(t *testing.T) {
		r := newDoubtRig(t)
		if err := r.st.Commit(ctx, r.batch(0, "a")); err != nil {
			t.Fatal(err)
		}
		r.proxy.DropNextExec()
		err := r.st.Commit(ctx, r.batch(1, "b", "c"))
		if !errors.Is(err, checkpoint.ErrInDoubt) || r.proxy.Dropped() != 1 {
			t.Fatalf("commit whose request was lost: %v (dropped %d), want ErrInDoubt", err, r.proxy.Dropped())
		}
		if got := r.streamIDs(t); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("stream %v before the doubt is resolved, want [a]", got)
		}
		st, err := r.st.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.streamIDs(t), []string{"a", "b", "c"}; !slices.Equal(got, want) {
			t.Fatalf("after Load: stream %v, want %v (the commit written once, unchanged)", got, want)
		}
		if st.Checkpoints[r.sh] != 2 || r.checkpoint(t) != "2" || r.st.InDoubt() != 0 {
			t.Fatalf("after Load: checkpoint loaded %d, in Redis %q, in doubt %d; want 2, 2, 0", st.Checkpoints[r.sh], r.checkpoint(t), r.st.InDoubt())
		}
	})

	t.Run("landed, then Redis lost it alone", func(t *testing.T) {
		r := newDoubtRig(t, "--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0")
		if err := r.st.Commit(ctx, r.batch(0, "a")); err != nil {
			t.Fatal(err)
		}
		file, size := r.aofSize(t)
		r.proxy.DropNextExecReply()
		if err := r.st.Commit(ctx, r.batch(1, "b", "c")); !errors.Is(err, checkpoint.ErrInDoubt) {
			t.Fatalf("commit whose reply was lost: %v, want ErrInDoubt", err)
		}
		if got := r.streamIDs(t); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("stream %v, want the commit in doubt landed: [a b c]", got)
		}
		r.powerCut(t, file, size)
		if got := r.streamIDs(t); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("stream %v after the power cut, want [a]", got)
		}
		if _, err := r.st.Load(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := r.streamIDs(t), []string{"a", "b", "c"}; !slices.Equal(got, want) || r.checkpoint(t) != "2" {
			t.Fatalf("after Load: stream %v, checkpoint %q; want %v, 2 (the commit Redis lost written again, unchanged)", got, r.checkpoint(t), want)
		}
		if rb, err := r.st.Rebase(ctx); err != nil || rb.Commits != 0 {
			t.Fatalf("Rebase = %+v, %v; want nothing lost", rb, err)
		}
	})

	t.Run("landed, then Redis lost it with an earlier commit", func(t *testing.T) {
		r := newDoubtRig(t, "--appendonly", "yes", "--appendfsync", "always", "--auto-aof-rewrite-percentage", "0")
		if err := r.st.Commit(ctx, r.batch(0, "a")); err != nil {
			t.Fatal(err)
		}
		file, size := r.aofSize(t)
		if err := r.st.Commit(ctx, r.batch(1, "b")); err != nil {
			t.Fatal(err)
		}
		r.proxy.DropNextExecReply()
		if err := r.st.Commit(ctx, r.batch(2, "c")); !errors.Is(err, checkpoint.ErrInDoubt) {
			t.Fatalf("commit whose reply was lost: %v, want ErrInDoubt", err)
		}
		r.powerCut(t, file, size)
		if _, err := r.st.Load(ctx); !errors.Is(err, checkpoint.ErrRolledBack) {
			t.Fatalf("Load after Redis lost 2 commits: %v, want ErrRolledBack", err)
		}
		rb, err := r.st.Rebase(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := docIDs(rb.Delivered[r.sh]); rb.Commits != 1 || !slices.Equal(got, []string{"b", "c"}) {
			t.Fatalf("Rebase = %d commits lost delivering %v; want 1 known commit lost and the documents of both: [b c]", rb.Commits, got)
		}
		if got := r.streamIDs(t); !slices.Equal(got, []string{"a"}) || r.st.InDoubt() != 0 {
			t.Fatalf("stream %v, in doubt %d; want [a] (nothing written again on a rolled-back feed), 0", got, r.st.InDoubt())
		}
	})
}

func docIDs(docs []checkpoint.Doc) []string {
	var out []string
	for _, d := range docs {
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return out
}
