package deletes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// TestScanner_Scan_PacedByBudget: with no least interval (the default) a
// shard is scanned at its first sight and then again once the pause its
// last scan's cluster time earned has passed: none with Budget 1, about
// 10,000 times that time with Budget 0.0001. A first abort leaves the
// shard due at once; a second in a row is paced like any scan.
func TestScanner_Scan_PacedByBudget(t *testing.T) {
	ids := docIDs("doc", 10)
	setup := func(t *testing.T, budget float64) (*feedFixture, *deletes.Scanner, deletes.Shard) {
		f := newFeedFixture(t, "paced")
		f.write(ids, false, "")
		f.deliver(f.live())
		f.write(ids[:2], true, "")
		sc := f.scannerWith(func(c *deletes.Config) { c.Interval, c.Budget = 0, budget })
		return f, sc, f.shard(2)
	}
	scan := func(t *testing.T, sc *deletes.Scanner, sh deletes.Shard) deletes.Result {
		t.Helper()
		res, err := sc.Scan(context.Background(), sh)
		if err != nil && !errors.Is(err, deletes.ErrAborted) {
			t.Fatal(err)
		}
		return res
	}
	t.Run("budget 1: no pause", func(t *testing.T) {
		_, sc, sh := setup(t, 1)
		if res := scan(t, sc, sh); !res.Scanned || res.Deleted != 2 || res.Requests == 0 {
			t.Fatalf("first sight: %+v, want a scan that deletes 2 with some requests", res)
		}
		if res := scan(t, sc, sh); !res.Scanned {
			t.Errorf("right after: %+v, want scanned again", res)
		}
	})
	t.Run("budget 0.0001: paused", func(t *testing.T) {
		_, sc, sh := setup(t, 0.0001)
		first := scan(t, sc, sh)
		if !first.Scanned || first.Deleted != 2 || first.ClusterTime <= 0 {
			t.Fatalf("first sight: %+v, want a scan that deletes 2 in some cluster time", first)
		}
		if res := scan(t, sc, sh); res.Scanned {
			t.Errorf("right after a scan of %s with budget 0.0001: %+v, want not due for ~%s", first.ClusterTime, res, first.ClusterTime*9999)
		}
		if st := sc.Stats(); st.Due != 1 || st.Requests != first.Requests || st.ClusterTime != first.ClusterTime {
			t.Errorf("stats %+v: want 1 due with the first scan's %d requests in %s", st, first.Requests, first.ClusterTime)
		}
	})
	t.Run("budget 0.5: due after the cluster time", func(t *testing.T) {
		_, sc, sh := setup(t, 0.5)
		first := scan(t, sc, sh)
		time.Sleep(first.ClusterTime + time.Millisecond)
		if res := scan(t, sc, sh); !res.Scanned {
			t.Errorf("%s after a scan of %s with budget 0.5: %+v, want due", first.ClusterTime+time.Millisecond, first.ClusterTime, res)
		}
	})
	t.Run("a first abort retries at once, a second is paced", func(t *testing.T) {
		f, sc, sh := setup(t, 0.0001)
		if err := f.emu.InjectFault(esemu.Fault{Kind: esemu.KindCount, Status: 503, Count: 2}); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, true, false} {
			if res := scan(t, sc, sh); res.Scanned != want {
				t.Errorf("scan %d: %+v, want scanned %v", i+1, res, want)
			}
		}
		if st := sc.Stats(); st.Aborted != 2 || st.Deletes != 0 {
			t.Errorf("stats %+v: want 2 aborted, no delete", st)
		}
	})
}

// TestScanner_Scan_RefreshesOnlyWhenNeeded: the scan forces a refresh
// before its count unless the relay's last refresh came after every op up
// to the checkpoint was processed on the same primary.
func TestScanner_Scan_RefreshesOnlyWhenNeeded(t *testing.T) {
	tests := []struct {
		name      string
		refreshed func(sc es.ShardCheckpoints) es.ShardCheckpoints
		want      int
	}{
		{"unknown", func(es.ShardCheckpoints) es.ShardCheckpoints { return es.ShardCheckpoints{} }, 1},
		{"the same primary, its global checkpoint covers the checkpoint", func(sc es.ShardCheckpoints) es.ShardCheckpoints { return sc }, 0},
		{"the same primary, below the checkpoint", func(sc es.ShardCheckpoints) es.ShardCheckpoints {
			sc.GlobalCheckpoint--
			return sc
		}, 1},
		{"another node", func(sc es.ShardCheckpoints) es.ShardCheckpoints {
			sc.Node += "-other"
			return sc
		}, 1},
		{"another term", func(sc es.ShardCheckpoints) es.ShardCheckpoints {
			sc.PrimaryTerm++
			return sc
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeedFixture(t, "refreshes")
			f.write(docIDs("doc", 10), false, "")
			f.deliver(f.live())
			f.write([]string{"never"}, true, "") // a seq no read past, nothing gone
			st, err := f.es.Stats(context.Background(), []string{"docs"})
			if err != nil {
				t.Fatal(err)
			}
			now, _ := st["docs"].Shard(0)
			sh := f.shard(1)
			sh.Refreshed = tt.refreshed(now)
			sc := f.scannerWith(func(c *deletes.Config) { c.Interval = 0 })
			before := f.emu.RequestCounts()[esemu.KindRefresh]
			res, err := sc.Scan(context.Background(), sh)
			if err != nil || !res.Scanned || res.GapCleared != 1 {
				t.Fatalf("Scan = %+v, %v; want the count proof to clear the gap", res, err)
			}
			if got := f.emu.RequestCounts()[esemu.KindRefresh] - before; got != tt.want {
				t.Errorf("%d refreshes, want %d", got, tt.want)
			}
			if st := sc.Stats(); st.SavedByCount != 1 {
				t.Errorf("stats %+v: want saved by the count proof", st)
			}
		})
	}
}
