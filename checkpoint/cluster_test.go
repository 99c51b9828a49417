package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// clusterStore is a Store of feed on a Redis Cluster client made from a
// redis-cluster:// URL.
func clusterStore(tb testing.TB, c *redistest.Cluster, feed string, cfg checkpoint.Config) (*checkpoint.Store, redis.UniversalClient) {
	tb.Helper()
	rdb, err := redisx.NewClient(c.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rdb.Close() })
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		tb.Fatalf("NewClient(%s) = %T, want a *redis.ClusterClient", c.URL(), rdb)
	}
	keys := redisx.NewKeys(feed)
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: 5 * time.Second, Owner: "test"})
	if err != nil {
		tb.Fatal(err)
	}
	if ok, err := lease.TryAcquire(context.Background()); err != nil || !ok {
		tb.Fatalf("acquire: %v %v", ok, err)
	}
	cfg.Client, cfg.Keys, cfg.Lease = rdb, keys, lease
	st, err := checkpoint.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return st, rdb
}

func TestStore_OnRedisCluster(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: 1})
	st, rdb := clusterStore(t, c, "cl", checkpoint.Config{})
	sh := checkpoint.ShardID{IndexUUID: "U1", Shard: 0}
	for i := range 3 {
		b := checkpoint.Batch{Events: []redisx.Event{upsert("U1", 0, "a", int64(i))}, Checkpoints: map[checkpoint.ShardID]int64{sh: int64(i)},
			Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh: {{ID: "a", Routing: "r"}}}}
		if err := st.Commit(ctx, b); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	state, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := state.Checkpoints[sh], int64(2); got != want {
		t.Errorf("checkpoint = %d, want %d", got, want)
	}
	keys := st.Keys()
	if got, want := rdb.XLen(ctx, keys.Events()).Val(), int64(3); got != want {
		t.Errorf("stream length = %d, want %d", got, want)
	}
	// Reset scans every master and drops the state, not the stream or lease.
	n, err := st.Reset(ctx)
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if n < 4 { // checkpoints, delivered, routing, meta
		t.Errorf("Reset deleted %d keys, want >= 4", n)
	}
	for _, k := range []string{keys.Checkpoints(), keys.Delivered("U1", 0), keys.Routing("U1", 0), keys.Meta()} {
		if rdb.Exists(ctx, k).Val() != 0 {
			t.Errorf("%s survived Reset", k)
		}
	}
	for _, k := range []string{keys.Events(), keys.Lease()} {
		if rdb.Exists(ctx, k).Val() != 1 {
			t.Errorf("%s was deleted by Reset", k)
		}
	}
}

func TestStore_WaitReplicas(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: 1})
	sh := checkpoint.ShardID{IndexUUID: "U1", Shard: 0}
	batch := func(i int) checkpoint.Batch {
		return checkpoint.Batch{Events: []redisx.Event{upsert("U1", 0, "a", int64(i))}, Checkpoints: map[checkpoint.ShardID]int64{sh: int64(i)},
			Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh: {{ID: fmt.Sprint("d", i)}}}}
	}
	// lose rolls the feed's commit counter back by one, as a failover to a
	// replica that lacked the last commit would, and Rebases.
	lose := func(t *testing.T, st *checkpoint.Store, rdb redis.UniversalClient) checkpoint.RolledBack {
		t.Helper()
		if err := rdb.HIncrBy(ctx, st.Keys().Meta(), checkpoint.MetaCommits, -1).Err(); err != nil {
			t.Fatal(err)
		}
		rb, err := st.Rebase(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rb
	}
	t.Run("acknowledged", func(t *testing.T) {
		st, rdb := clusterStore(t, c, "w1", checkpoint.Config{WaitReplicas: 1})
		for i := range 3 {
			if err := st.Commit(ctx, batch(i)); err != nil {
				t.Fatalf("commit %d with 1 replica: %v", i, err)
			}
		}
		rb := lose(t, st, rdb)
		if rb.Commits != 1 || rb.Acknowledged != 1 || len(rb.Delivered[sh]) != 1 {
			t.Errorf("an acknowledged commit lost: Rebase = %+v, want 1 commit, 1 acknowledged, its document", rb)
		}
	})
	t.Run("too few replicas", func(t *testing.T) {
		st, rdb := clusterStore(t, c, "w2", checkpoint.Config{WaitReplicas: 2, WaitTimeout: 100 * time.Millisecond})
		start := time.Now()
		err := st.Commit(ctx, batch(0))
		if !errors.Is(err, checkpoint.ErrNotReplicated) {
			t.Fatalf("commit waiting for 2 replicas of 1: %v, want ErrNotReplicated", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("commit took %s with a 100ms WAIT timeout", d)
		}
		t.Log(err)
		// Written on the master all the same, and the next commit goes on
		// from it (no rollback).
		if got := rdb.XLen(ctx, st.Keys().Events()).Val(); got != 1 {
			t.Errorf("stream length = %d, want 1", got)
		}
		if err := st.Commit(ctx, batch(1)); !errors.Is(err, checkpoint.ErrNotReplicated) {
			t.Fatalf("second commit: %v, want ErrNotReplicated", err)
		}
		// Both unacknowledged commits are remembered: losing the last
		// reports it and its document, not as acknowledged.
		rb := lose(t, st, rdb)
		if rb.Commits != 1 || rb.Acknowledged != 0 || len(rb.Delivered[sh]) != 1 || rb.Delivered[sh][0].ID != "d1" {
			t.Errorf("an unacknowledged commit lost: Rebase = %+v, want 1 commit, 0 acknowledged, document d1", rb)
		}
	})
}

func TestStore_WaitReplicasSingleServer(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb, err := redisx.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	keys := redisx.NewKeys("ws")
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	st, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Commit(ctx, checkpoint.Batch{Events: []redisx.Event{upsert("U1", 0, "a", 0)}})
	if !errors.Is(err, checkpoint.ErrNotReplicated) {
		t.Fatalf("commit to a server without replicas, waiting for 1: %v, want ErrNotReplicated", err)
	}
	if _, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, WaitReplicas: -1}); err == nil {
		t.Error("WaitReplicas -1 accepted")
	}
}

// TestStore_ClusterACL runs the Store on a Redis Cluster as a user with
// only the relay's rules of docs/SECURITY.md plus what Redis Cluster and
// WaitReplicas add (+cluster|slots, +wait), set on every node.
func TestStore_ClusterACL(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: 1})
	rules := strings.Fields("resetkeys ~escf:{acl}:* resetchannels -@all +ping +select +type +scan +get +set +del +expire +pexpire +evalsha +eval +watch +unwatch +multi +exec +hget +hset +hdel +hgetall +hmget +hincrby +sadd +srem +scard +sdiff +sscan +xadd +xlen +xtrim +xpending +xinfo|stream +xinfo|groups +cluster|slots +wait")
	for _, n := range c.Nodes {
		n.SetUser(t, "escf-relay", "pw", rules...)
	}
	url := strings.Replace(c.URL(), "redis-cluster://", "redis-cluster://escf-relay:pw@", 1)
	rdb, err := redisx.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := redisx.Check(ctx, rdb, redisx.ClientConfig{URL: url}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	keys := redisx.NewKeys("acl")
	if err := redisx.CheckKeyTypes(ctx, rdb, keys); err != nil {
		t.Fatalf("CheckKeyTypes: %v", err)
	}
	lease, err := redisx.NewLease(redisx.LeaseConfig{Client: rdb, Key: keys.Lease(), TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	st, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: keys, Lease: lease, WaitReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	sh := checkpoint.ShardID{IndexUUID: "U1", Shard: 0}
	if err := st.Commit(ctx, checkpoint.Batch{Events: []redisx.Event{upsert("U1", 0, "a", 0)}, Checkpoints: map[checkpoint.ShardID]int64{sh: 0},
		Delivered: map[checkpoint.ShardID][]checkpoint.Doc{sh: {{ID: "a"}}}}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if _, err := st.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if _, err := st.Reset(ctx); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
