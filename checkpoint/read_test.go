package checkpoint_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// TestRead_WhatCommitWrote: the readers of the state hashes read back what
// Commit wrote, and say "none" for a shard or uuid it never wrote.
func TestRead_WhatCommitWrote(t *testing.T) {
	ctx := context.Background()
	st, lease, _ := newStore(t, "readers", time.Second)
	if ok, err := lease.TryAcquire(ctx); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	rdb, k := st.Client(), st.Keys()
	sh0 := checkpoint.ShardID{IndexUUID: "U1", Shard: 0}
	if err := st.Commit(ctx, checkpoint.Batch{
		Events:      []redisx.Event{upsert("U1", 0, "a", 0), upsert("U1", 0, "b", 70)},
		Checkpoints: map[checkpoint.ShardID]int64{sh0: 71},
		Delivered:   map[checkpoint.ShardID][]checkpoint.Doc{sh0: {{ID: "a", SeqNo: 0}, {ID: "b", Routing: "r1", SeqNo: 70}}},
		Gaps:        map[checkpoint.ShardID]int64{sh0: 2},
		Histories:   map[checkpoint.ShardID]string{sh0: "h-0"},
		Meta:        map[string]string{checkpoint.MetaCreated: "2024-01-01T00:00:00Z"},
		Generations: map[string]int64{"U1": 3, "name:idx": 3},
	}); err != nil {
		t.Fatal(err)
	}
	// The layout before ranges, which nothing writes any more.
	if err := rdb.SAdd(ctx, k.Delivered("U1", 0), "old-1", "old-2").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k.Routing("U1", 0), "old-2", "r2").Err(); err != nil {
		t.Fatal(err)
	}

	t.Run("meta", func(t *testing.T) {
		meta, err := checkpoint.ReadMeta(ctx, rdb, k)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := meta[checkpoint.MetaCreated], "2024-01-01T00:00:00Z"; got != want {
			t.Errorf("meta %s = %q, want %q", checkpoint.MetaCreated, got, want)
		}
		if meta[checkpoint.MetaCommits] != "1" {
			t.Errorf("meta %s = %q, want 1", checkpoint.MetaCommits, meta[checkpoint.MetaCommits])
		}
	})
	t.Run("cursor", func(t *testing.T) {
		got, err := checkpoint.ReadCursor(ctx, rdb, k, sh0)
		if err != nil {
			t.Fatal(err)
		}
		if want := (checkpoint.Cursor{Checkpoint: 71, Read: true, History: "h-0", Gap: 2}); got != want {
			t.Errorf("ReadCursor = %+v, want %+v", got, want)
		}
		got, err = checkpoint.ReadCursor(ctx, rdb, k, checkpoint.ShardID{IndexUUID: "U1", Shard: 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := (checkpoint.Cursor{Checkpoint: -1}); got != want {
			t.Errorf("ReadCursor of a shard never read = %+v, want %+v", got, want)
		}
	})
	t.Run("generation", func(t *testing.T) {
		tests := []struct {
			name, uuid string
			want       int64
			wantErr    error
		}{
			{name: "assigned", uuid: "U1", want: 3},
			{name: "none", uuid: "U2", want: 0},
			{name: "junk", uuid: "U3", wantErr: checkpoint.ErrBadGeneration},
		}
		if err := rdb.HSet(ctx, k.Generations(), "U3", "x").Err(); err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := checkpoint.ReadGeneration(ctx, rdb, k, tt.uuid)
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != tt.want {
					t.Errorf("ReadGeneration(%s) = %d, want %d", tt.uuid, got, tt.want)
				}
			})
		}
	})
	t.Run("delivered size", func(t *testing.T) {
		got, err := checkpoint.ReadDeliveredSize(ctx, rdb, k, sh0)
		if err != nil {
			t.Fatal(err)
		}
		if want := (checkpoint.DeliveredSize{IDs: 2, Ranges: 2, Legacy: 2}); got != want {
			t.Errorf("ReadDeliveredSize = %+v, want %+v", got, want)
		}
	})
	t.Run("legacy routing", func(t *testing.T) {
		got, err := checkpoint.ReadLegacyRouting(ctx, rdb, k, sh0, []string{"old-1", "old-2", "never"})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"", "r2", ""}; !slices.Equal(got, want) {
			t.Errorf("ReadLegacyRouting = %q, want %q", got, want)
		}
	})
	t.Run("redis error", func(t *testing.T) {
		if err := rdb.Set(ctx, k.Meta(), "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := checkpoint.ReadMeta(ctx, rdb, k); !redis.HasErrorPrefix(err, "WRONGTYPE") {
			t.Errorf("ReadMeta of a string: err = %v, want WRONGTYPE", err)
		}
	})
}
