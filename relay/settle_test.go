package relay

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
)

// TestRelay_SettlePending: a held page commits once a round's stats show
// the gcp at the max seq no the first stats after its search reported, on
// the same primary; a new primary (node, term or history) drops it
// uncommitted; a shard without a started primary keeps it; a gcp that
// stays below for settleTimeout is an error.
func TestRelay_SettlePending(t *testing.T) {
	primary := es.ShardCheckpoints{Shard: 0, PrimaryTerm: 1, Node: "node-1", HistoryUUID: "hist-1", GlobalCheckpoint: 4, MaxSeqNo: 4}
	with := func(mod func(*es.ShardCheckpoints)) es.ShardCheckpoints {
		sc := primary
		mod(&sc)
		return sc
	}
	tests := []struct {
		name   string
		target int64 // the page's target before the round (-1: not read yet)
		age    time.Duration
		shards []es.ShardCheckpoints // the round's stats
		// committed: the page's events and checkpoint are in Redis;
		// pending: the page is still held, with target wantTarget.
		committed, pending bool
		wantTarget         int64
		wantErr            string
	}{
		{name: "first stats: the gcp already covers the max seq no",
			shards: []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.GlobalCheckpoint, s.MaxSeqNo = 6, 6 })}, committed: true},
		{name: "first stats: the gcp below the max seq no", shards: []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.GlobalCheckpoint, s.MaxSeqNo = 5, 7 })},
			pending: true, wantTarget: 7},
		{name: "later stats: the gcp reached the target", target: 7,
			shards: []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.GlobalCheckpoint, s.MaxSeqNo = 7, 9 })}, committed: true},
		{name: "later stats: the gcp still below the target", target: 7,
			shards: []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.GlobalCheckpoint, s.MaxSeqNo = 6, 9 })}, pending: true, wantTarget: 7},
		{name: "the primary moved to another node", target: 7,
			shards: []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.Node, s.GlobalCheckpoint, s.MaxSeqNo = "node-2", 9, 9 })}},
		{name: "a new primary term",
			shards: []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.PrimaryTerm, s.GlobalCheckpoint, s.MaxSeqNo = 2, 9, 9 })}},
		{name: "a new history",
			shards: []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.HistoryUUID, s.GlobalCheckpoint, s.MaxSeqNo = "hist-2", 9, 9 })}},
		{name: "no started primary: a failover under way", target: -1, shards: nil, pending: true, wantTarget: -1},
		{name: "the gcp stays below for too long", target: 7, age: settleTimeout + time.Second,
			shards:  []es.ShardCheckpoints{with(func(s *es.ShardCheckpoints) { s.GlobalCheckpoint, s.MaxSeqNo = 6, 9 })},
			pending: true, wantTarget: 7, wantErr: "a replica is not keeping up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRoundEnv(t, "settle")
			r := e.relay(t, []string{"idx"}, nil)
			const uuid = "uuid-of-idx"
			cur := &cursor{target: "idx", uuid: uuid, cps: map[int]int64{}, gaps: map[int]int64{}, histories: map[int]string{},
				state: checkpoint.State{Checkpoints: map[checkpoint.ShardID]int64{}, Histories: map[checkpoint.ShardID]string{}}}
			target := tt.target
			if tt.target == 0 {
				target = -1
			}
			pg := &page{shard: 0, after: -1, next: 4, primary: primary, target: target, since: time.Now().Add(-tt.age),
				hits: []es.Hit{{ID: "a", SeqNo: 0, PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{}`)},
					{ID: "b", SeqNo: 3, PrimaryTerm: 1, Version: 2, Source: json.RawMessage(`{}`)}}}
			if !r.hold(pg.size()) {
				t.Fatal("no hold for the page")
			}
			cur.pending = map[int]*page{0: pg}
			err := r.settlePending(context.Background(), "idx", es.IndexStats{Name: "idx", UUID: uuid, Shards: tt.shards}, cur)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("settlePending: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("settlePending: %v, want an error saying %q", err, tt.wantErr)
			}
			cp, gap := e.shardState(t, uuid, 0)
			got := e.upserted(t)
			if tt.committed {
				if want := []string{"a@0", "b@3"}; !slices.Equal(got, want) || cp != 4 || gap != 3 {
					t.Errorf("committed: upserts %v, checkpoint %d, gap %d; want %v, 4, 3", got, cp, gap, want)
				}
				if h := e.state(t).Histories[checkpoint.ShardID{IndexUUID: uuid, Shard: 0}]; h != "hist-1" {
					t.Errorf("history recorded %q, want the page's primary's hist-1", h)
				}
				if cur.cps[0] != 4 || !cur.readTo[0] {
					t.Errorf("cursor: checkpoint %d, read to %v; want 4, true", cur.cps[0], cur.readTo[0])
				}
			} else if len(got) != 0 || cp != -2 {
				t.Errorf("not committed: upserts %v, checkpoint %d; want none", got, cp)
			}
			held, ok := cur.pending[0]
			if ok != tt.pending {
				t.Fatalf("page pending %v, want %v", ok, tt.pending)
			}
			wantHeld := 0
			if tt.pending {
				wantHeld = pg.size()
				if held.target != tt.wantTarget {
					t.Errorf("page target %d, want %d", held.target, tt.wantTarget)
				}
			}
			if r.held != wantHeld {
				t.Errorf("%d hits held, want %d", r.held, wantHeld)
			}
		})
	}
}

// TestSettleDelay: the pause before settling held pages again: none at
// first, then doubling from 5 ms, capped at 100 ms, jittered down to no
// less than half of that (internal/backoff).
func TestSettleDelay(t *testing.T) {
	for tries, want := range []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
		40 * time.Millisecond, 80 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond} {
		for range 20 {
			if got := settleDelay(tries); got > want || got < want/2 {
				t.Fatalf("settleDelay(%d) = %s, want %s to %s", tries, got, want/2, want)
			}
		}
	}
}
