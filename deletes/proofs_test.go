package deletes_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// front stands between the scanner and the emulator while armed: it
// answers 503 to the requests fail picks and passes the others on, with
// the answers rewrite returns (n counts the _stats requests, from 1).
type front struct {
	armed   atomic.Bool
	stats   atomic.Int32
	fail    func(path string, body []byte) bool
	rewrite func(path string, n int, body []byte) []byte
}

// through makes f's client go through a front to its emulator.
func (f *feedFixture) through(fr *front) {
	f.t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		armed := fr.armed.Load()
		n := 0
		if armed && strings.Contains(r.URL.Path, "/_stats") {
			n = int(fr.stats.Add(1))
		}
		if armed && fr.fail != nil && fr.fail(r.URL.Path, body) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"root_cause":[],"type":"unavailable_shards_exception","reason":"injected by the test"},"status":503}`)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, f.url+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := httpClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if armed && fr.rewrite != nil {
			out = fr.rewrite(r.URL.Path, n, out)
		}
		for k, v := range resp.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(out)
	}))
	f.t.Cleanup(srv.Close)
	var err error
	if f.es, err = es.New(es.Config{URLs: []string{srv.URL}}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.es.Info(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// scannerWith is a scanner of the fixture's feed (interval 1ns, budget 1:
// no pause after a scan, durable wait 1s), adjusted by mod.
func (f *feedFixture) scannerWith(mod func(*deletes.Config)) *deletes.Scanner {
	f.t.Helper()
	f.metrics = prometheus.NewPedanticRegistry()
	cfg := deletes.Config{ES: f.es, Client: f.rdb, Keys: f.keys, Store: f.store, Interval: time.Nanosecond,
		Budget: 1, DurableWait: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: f.metrics}
	if mod != nil {
		mod(&cfg)
	}
	sc, err := deletes.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return sc
}

// shard is the fixture's shard as the relay knows it: read up to the
// cluster's max seq no, with gap (also committed to its gap counter, as
// the relay's reads did).
func (f *feedFixture) shard(gap int64) deletes.Shard {
	f.t.Helper()
	if gap != 0 {
		id := checkpoint.ShardID{IndexUUID: f.uuid, Shard: 0}
		if err := f.store.Commit(context.Background(), checkpoint.Batch{Gaps: map[checkpoint.ShardID]int64{id: gap}}); err != nil {
			f.t.Fatal(err)
		}
	}
	return deletes.Shard{Index: "docs", Target: "docs-target", UUID: f.uuid, Shard: 0, Checkpoint: f.maxSeqNo(), Gap: gap, Origin: -1}
}

// firstSight lets sc see the shard once: a scanner's first sight of a
// shard only starts its interval.
func firstSight(t *testing.T, sc *deletes.Scanner, sh deletes.Shard) {
	t.Helper()
	if res, err := sc.Scan(context.Background(), sh); err != nil || res != (deletes.Result{}) {
		t.Fatalf("first sight: %+v, %v; want nothing done", res, err)
	}
}

func (f *feedFixture) gapCounter() int64 {
	f.t.Helper()
	g, err := f.rdb.HGet(context.Background(), f.keys.Checkpoints(), redisx.GapField(f.uuid, 0)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		f.t.Fatal(err)
	}
	return g
}

func (f *feedFixture) deliveredTotal() int64 {
	f.t.Helper()
	_, total, err := checkpoint.RangeCounts(context.Background(), f.rdb, f.keys, checkpoint.ShardID{IndexUUID: f.uuid, Shard: 0})
	if err != nil {
		f.t.Fatal(err)
	}
	return total
}

// reads counts the emulator's shard reads (searches and counts).
func (f *feedFixture) reads() int {
	c := f.emu.RequestCounts()
	return c[esemu.KindSearch] + c[esemu.KindCount]
}

// requests counts every request the emulator answered.
func (f *feedFixture) requests() int {
	n := 0
	for _, c := range f.emu.RequestCounts() {
		n += c
	}
	return n
}

// TestScanner_Scan_Proofs: which scans list nothing, and what each scan
// commits. Ten documents are delivered first; then each case changes the
// index, and the relay's gap counter says how many seq nos it read past.
func TestScanner_Scan_Proofs(t *testing.T) {
	ids := docIDs("doc", 10)
	never := []string{"never-1", "never-2", "never-3"} // deleting them takes seq nos and changes nothing
	tests := []struct {
		name       string
		noDeliver  bool
		change     func(f *feedFixture)
		gap        int64
		interval   time.Duration
		maxFrac    float64
		want       deletes.Result
		stats      deletes.Stats // Due, SavedByGap, SavedByCount, Localized, Confirmations, StaleRemoved, Deletes
		deleted    []string
		noReads    bool // the scan reads no shard (no search, no count)
		totalAfter int64
	}{
		{name: "not due within the interval", interval: time.Hour, gap: 2,
			change: func(f *feedFixture) { f.write(ids[:2], true, "") },
			want:   deletes.Result{}, noReads: true, totalAfter: 10},
		{name: "gap proof: nothing read past, nothing listed", gap: 0,
			change: func(f *feedFixture) { f.write(ids[:2], true, "") },
			want:   deletes.Result{Scanned: true}, stats: deletes.Stats{Due: 1, SavedByGap: 1}, noReads: true, totalAfter: 10},
		{name: "nothing delivered", noDeliver: true, gap: 3,
			change: func(f *feedFixture) { f.write(never, true, "") },
			want:   deletes.Result{Scanned: true, GapCleared: 3}, stats: deletes.Stats{Due: 1, SavedByCount: 1}, noReads: true},
		{name: "count proof: as many documents as entries", gap: 3,
			change: func(f *feedFixture) { f.write(never, true, "") },
			want:   deletes.Result{Scanned: true, GapCleared: 3}, stats: deletes.Stats{Due: 1, SavedByCount: 1}, totalAfter: 10},
		{name: "two deletes found", gap: 2,
			change: func(f *feedFixture) { f.write([]string{ids[2], ids[7]}, true, "") },
			want:   deletes.Result{Scanned: true, Deleted: 2, GapCleared: 2}, stats: deletes.Stats{Due: 1, Localized: 1, Deletes: 2},
			deleted: []string{ids[2], ids[7]}, totalAfter: 8},
		{name: "updates to a later range leave stale entries: removed without an event", gap: deletes.K + 2,
			change: func(f *feedFixture) {
				f.write(docIDs("never", deletes.K), true, "") // the updates land in the next range
				f.write(ids[:2], false, "")
				var moved []checkpoint.Doc
				for _, d := range f.live() {
					if d.ID == ids[0] || d.ID == ids[1] {
						moved = append(moved, d)
					}
				}
				f.deliver(moved)
			},
			want: deletes.Result{Scanned: true, GapCleared: deletes.K + 2}, stats: deletes.Stats{Due: 1, Localized: 1, StaleRemoved: 2}, totalAfter: 10},
		{name: "a mass delete is confirmed by a second pass", gap: 6, maxFrac: 0.5,
			change: func(f *feedFixture) { f.write(ids[:6], true, "") },
			want:   deletes.Result{Scanned: true, Deleted: 6, GapCleared: 6}, stats: deletes.Stats{Due: 1, Localized: 1, Confirmations: 1, Deletes: 6},
			deleted: ids[:6], totalAfter: 4},
		{name: "a small delete needs no confirmation", gap: 6, maxFrac: 0.7,
			change: func(f *feedFixture) { f.write(ids[:6], true, "") },
			want:   deletes.Result{Scanned: true, Deleted: 6, GapCleared: 6}, stats: deletes.Stats{Due: 1, Localized: 1, Deletes: 6},
			deleted: ids[:6], totalAfter: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeedFixture(t, "proofs")
			f.write(ids, false, "")
			if !tt.noDeliver {
				f.deliver(f.live())
			}
			tt.change(f)
			sc := f.scannerWith(func(c *deletes.Config) {
				if tt.interval > 0 {
					c.Interval = tt.interval
				}
				c.MaxDeleteFraction = tt.maxFrac
			})
			sh := f.shard(tt.gap)
			firstSight(t, sc, sh)
			reads, all := f.reads(), f.requests()
			res, err := sc.Scan(context.Background(), sh)
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if got := f.requests() - all; res.Requests != int64(got) || (got > 0) != (res.ClusterTime > 0) {
				t.Errorf("Scan counted %d requests in %s; the emulator answered %d", res.Requests, res.ClusterTime, got)
			}
			res.Requests, res.ClusterTime = 0, 0
			if res != tt.want {
				t.Errorf("Scan = %+v, want %+v", res, tt.want)
			}
			st := sc.Stats()
			got := deletes.Stats{Due: st.Due, SavedByGap: st.SavedByGap, SavedByCount: st.SavedByCount, Localized: st.Localized,
				Confirmations: st.Confirmations, StaleRemoved: st.StaleRemoved, Deletes: st.Deletes}
			if got != tt.stats || st.Aborted != 0 || st.Listings != 0 {
				t.Errorf("Stats = %+v, want %+v and no abort, no listing", st, tt.stats)
			}
			if tt.noReads && f.reads() != reads {
				t.Errorf("the scan read the shard %d times, want none", f.reads()-reads)
			}
			gone := f.deleteEvents()
			var goneIDs []string
			for id := range gone {
				goneIDs = append(goneIDs, id)
			}
			slices.Sort(goneIDs)
			if !slices.Equal(goneIDs, tt.deleted) {
				t.Errorf("delete events for %v, want %v", goneIDs, tt.deleted)
			}
			msgs, _ := f.rdb.XRange(context.Background(), f.keys.Events(), "-", "+").Result()
			for _, m := range msgs {
				e, _ := redisx.ParseEvent(m)
				if e.SeqNo != sh.Checkpoint || e.Target != sh.Target || e.IndexUUID != f.uuid || e.Index != "docs" {
					t.Errorf("delete event %+v: want seq no %d (the checkpoint), target %s, index docs/%s", e, sh.Checkpoint, sh.Target, f.uuid)
				}
			}
			if g := f.gapCounter(); g != tt.gap-tt.want.GapCleared {
				t.Errorf("gap counter %d, want %d", g, tt.gap-tt.want.GapCleared)
			}
			if got := f.deliveredTotal(); got != tt.totalAfter {
				t.Errorf("%d delivered entries, want %d", got, tt.totalAfter)
			}
		})
	}
}

var (
	statsGCP = regexp.MustCompile(`"global_checkpoint"\s*:\s*\d+`)
	shardsOK = regexp.MustCompile(`"successful"\s*:\s*1\s*,\s*"skipped"\s*:\s*0\s*,\s*"failed"\s*:\s*0`)
)

// TestScanner_Scan_AbortsOnPartialAnswers: a scan that meets an error, a
// partial or timed-out answer, a view older than the feed's checkpoint or
// a global checkpoint that does not cover its re-check emits nothing and
// changes nothing (delivered entries, gap counter): it wraps ErrAborted,
// counts as aborted, and the next scan, on a healthy cluster, finds the
// deletes.
func TestScanner_Scan_AbortsOnPartialAnswers(t *testing.T) {
	ids := docIDs("doc", 10)
	tests := []struct {
		name string
		// fault is injected in the emulator before the scan; failCopies
		// fails the shard's next reads on every copy; fr arms a front.
		fault      *esemu.Fault
		failCopies bool
		fr         *front
		ahead      int64 // the feed's checkpoint above the cluster's max seq no
		wantErr    string
	}{
		{name: "shard stats fail", fault: &esemu.Fault{Kind: esemu.KindStats, Status: 503, Count: 1}, wantErr: "read shard stats"},
		{name: "the refresh fails", fault: &esemu.Fault{Kind: esemu.KindRefresh, Status: 503, Count: 1}, wantErr: "refresh docs"},
		{name: "the count fails", fault: &esemu.Fault{Kind: esemu.KindCount, Status: 429, Count: 1}, wantErr: "count shard 0"},
		{name: "the histogram times out", fault: &esemu.Fault{Kind: esemu.KindSearch, TimedOut: true, Count: 1}, wantErr: "the aggregation timed out"},
		{name: "the histogram fails", fault: &esemu.Fault{Kind: esemu.KindSearch, Status: 503, Count: 1}, wantErr: "histogram of _seq_no"},
		{name: "the histogram has a failed shard", fr: &front{rewrite: func(_ string, _ int, body []byte) []byte {
			if !bytes.Contains(body, []byte(`"aggregations"`)) {
				return body
			}
			return shardsOK.ReplaceAll(body, []byte(`"successful":0,"skipped":0,"failed":1`))
		}}, wantErr: "1 of 1 shards failed"},
		{name: "every copy of the shard fails", failCopies: true, wantErr: "count shard 0 of docs"},
		{name: "the re-check fails", fr: &front{fail: func(path string, body []byte) bool {
			return strings.HasSuffix(path, "/_search") && bytes.Contains(body, []byte(`"ids"`))
		}}, wantErr: "re-check"},
		{name: "the view is older than the feed's checkpoint", ahead: 3, wantErr: "is older than the feed's checkpoint"},
		{name: "the global checkpoint never covers the re-check", fr: &front{rewrite: func(path string, n int, body []byte) []byte {
			if n < 4 { // 1: the first view, 2 and 3: the checks after the histograms
				return body
			}
			return statsGCP.ReplaceAll(body, []byte(`"global_checkpoint":0`))
		}}, wantErr: "a replica is not keeping up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeedFixture(t, "aborts")
			f.write(ids, false, "")
			f.deliver(f.live())
			f.write([]string{ids[3], ids[8]}, true, "")
			if tt.fr != nil {
				f.through(tt.fr)
			}
			sc := f.scannerWith(nil)
			sh := f.shard(2)
			sh.Checkpoint += tt.ahead
			firstSight(t, sc, sh)
			switch {
			case tt.fault != nil:
				if err := f.emu.InjectFault(*tt.fault); err != nil {
					t.Fatal(err)
				}
			case tt.failCopies:
				if err := f.emu.FailShardSearches("docs", 0, esemu.CopyAny, 1); err != nil {
					t.Fatal(err)
				}
			case tt.fr != nil:
				tt.fr.armed.Store(true)
			}
			res, err := sc.Scan(context.Background(), sh)
			if !errors.Is(err, deletes.ErrAborted) {
				t.Fatalf("Scan = %+v, %v; want an error wrapping ErrAborted", res, err)
			}
			if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Scan: %v, want it to say %q", err, tt.wantErr)
			}
			if st := sc.Stats(); st.Aborted != 1 || st.Deletes != 0 || st.Due != 1 {
				t.Errorf("Stats = %+v, want Due 1, Aborted 1, Deletes 0", st)
			}
			if got := f.deleteEvents(); len(got) != 0 {
				t.Errorf("the aborted scan emitted deletes %v", got)
			}
			if got := f.deliveredTotal(); got != 10 {
				t.Errorf("%d delivered entries after the abort, want 10", got)
			}
			if g := f.gapCounter(); g != 2 {
				t.Errorf("gap counter %d after the abort, want 2", g)
			}
			if got := f.metric("escf_delete_scans_total", "result", "aborted"); got != 1 {
				t.Errorf(`escf_delete_scans_total{result="aborted"} = %g, want 1`, got)
			}
			// The next round, on a healthy cluster: the shard is due at once.
			f.emu.ClearFaults()
			if tt.failCopies {
				if err := f.emu.StopFailingShardSearches("docs", 0); err != nil {
					t.Fatal(err)
				}
			}
			if tt.fr != nil {
				tt.fr.armed.Store(false)
			}
			sh.Checkpoint -= tt.ahead
			res, err = sc.Scan(context.Background(), sh)
			if err != nil || res.Deleted != 2 {
				t.Fatalf("the scan after the abort: %+v, %v; want 2 deletes", res, err)
			}
			if got := f.deleteEvents(); len(got) != 2 {
				t.Errorf("delete events %v, want %s and %s", got, ids[3], ids[8])
			}
		})
	}
}

// TestForgetIndex: an index that is gone ends with one delete per
// delivered id (each once, with its routing, stamped with its shard's
// checkpoint) when PerDocument, then its index_deleted event unless
// NoIndexEvent; every key of its state goes.
func TestForgetIndex(t *testing.T) {
	const uuid = "gone-uuid"
	info := checkpoint.IndexInfo{Name: "old", Target: "old*", Shards: 2}
	s0, s1 := checkpoint.ShardID{IndexUUID: uuid, Shard: 0}, checkpoint.ShardID{IndexUUID: uuid, Shard: 1}
	tests := []struct {
		name         string
		perDocument  bool
		noIndexEvent bool
		legacy       bool // shard 1 still has a delivered set of the layout before ranges
		want         []string
	}{
		{name: "index_deleted only", want: []string{"index_deleted"}},
		{name: "per document, then index_deleted", perDocument: true,
			want: []string{"delete a/0@5/r1", "delete b/0@5", "delete c/1@7", "index_deleted"}},
		{name: "per document, another partition's index event", perDocument: true, noIndexEvent: true,
			want: []string{"delete a/0@5/r1", "delete b/0@5", "delete c/1@7"}},
		{name: "per document, with an old set", perDocument: true, legacy: true,
			want: []string{"delete a/0@5/r1", "delete b/0@5", "delete c/1@7", "delete z/1@7/rz", "index_deleted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeedFixture(t, "forget")
			ctx := context.Background()
			// Shard 0: a at 1 (and a stale entry at 300, one range on),
			// b at 2; shard 1: c at 4, then a gap (a stale entry).
			b := checkpoint.Batch{
				Indices:     map[string]checkpoint.IndexInfo{uuid: info},
				Checkpoints: map[checkpoint.ShardID]int64{s0: 5, s1: 7},
				Gaps:        map[checkpoint.ShardID]int64{s0: 1, s1: 2},
				Delivered: map[checkpoint.ShardID][]checkpoint.Doc{
					s0: {{ID: "a", Routing: "r1", SeqNo: 1}, {ID: "b", SeqNo: 2}, {ID: "a", Routing: "r1", SeqNo: 300}},
					s1: {{ID: "c", SeqNo: 4}},
				},
			}
			if err := f.store.Commit(ctx, b); err != nil {
				t.Fatal(err)
			}
			if tt.legacy {
				f.rdb.SAdd(ctx, f.keys.Delivered(uuid, 1), "c", "z")
				f.rdb.HSet(ctx, f.keys.Routing(uuid, 1), "z", "rz")
			}
			n, err := deletes.ForgetIndex(ctx, f.rdb, f.keys, f.store, deletes.Gone{UUID: uuid, Info: info,
				Checkpoints: map[int]int64{0: 5, 1: 7}, PerDocument: tt.perDocument, NoIndexEvent: tt.noIndexEvent},
				slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatalf("ForgetIndex: %v", err)
			}
			msgs, err := f.rdb.XRange(ctx, f.keys.Events(), "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			deletesSeen := 0
			for _, m := range msgs {
				e, err := redisx.ParseEvent(m)
				if err != nil {
					t.Fatal(err)
				}
				if e.Index != info.Name || e.IndexUUID != uuid || e.Target != info.Target {
					t.Errorf("event %+v: want index %s/%s, target %s", e, info.Name, uuid, info.Target)
				}
				if e.Op != redisx.OpDelete {
					got = append(got, string(e.Op))
					continue
				}
				deletesSeen++
				s := fmt.Sprintf("delete %s/%d@%d", e.ID, e.Shard, e.SeqNo)
				if e.Routing != "" {
					s += "/" + e.Routing
				}
				got = append(got, s)
			}
			// The deletes' order between shards is not promised: compare
			// them sorted, the index event last.
			slices.Sort(got[:deletesSeen])
			if !slices.Equal(got, tt.want) {
				t.Errorf("events %v, want %v", got, tt.want)
			}
			if n != deletesSeen {
				t.Errorf("ForgetIndex = %d, want the %d deletes it emitted", n, deletesSeen)
			}
			keys, err := f.rdb.Keys(ctx, "*"+uuid+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != 0 {
				t.Errorf("keys of the gone index remain: %v", keys)
			}
			st, err := f.store.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := st.Indices[uuid]; ok || st.Checkpoints[s0] != 0 || st.Gaps[s1] != 0 {
				t.Errorf("state after ForgetIndex: indices %v, checkpoints %v, gaps %v; want the index gone", st.Indices, st.Checkpoints, st.Gaps)
			}
			if _, ok := st.Checkpoints[s0]; ok {
				t.Error("shard 0's checkpoint remains")
			}
		})
	}
}

func TestConfig_ValidateFields(t *testing.T) {
	base := deletes.Config{ES: &es.Client{}, Client: redis.NewClient(&redis.Options{}), Keys: redisx.NewKeys("v"), Store: &checkpoint.Store{}}
	tests := []struct {
		name    string
		mod     func(*deletes.Config)
		wantErr string
	}{
		{name: "minimal", mod: func(*deletes.Config) {}},
		{name: "every field", mod: func(c *deletes.Config) {
			c.Interval, c.MaxDeleteFraction, c.Listing, c.PageSize = time.Minute, 1, es.ListingScroll, 10000
		}},
		{name: "no ES", mod: func(c *deletes.Config) { c.ES = nil }, wantErr: "ES is nil"},
		{name: "no Client", mod: func(c *deletes.Config) { c.Client = nil }, wantErr: "Client is nil"},
		{name: "no Keys", mod: func(c *deletes.Config) { c.Keys = redisx.Keys{} }, wantErr: "Keys is empty"},
		{name: "no Store", mod: func(c *deletes.Config) { c.Store = nil }, wantErr: "Store is nil"},
		{name: "negative interval", mod: func(c *deletes.Config) { c.Interval = -time.Second }, wantErr: "Interval = -1s"},
		{name: "fraction above 1", mod: func(c *deletes.Config) { c.MaxDeleteFraction = 1.5 }, wantErr: "MaxDeleteFraction = 1.5"},
		{name: "unknown listing", mod: func(c *deletes.Config) { c.Listing = "bogus" }, wantErr: `Listing = "bogus"`},
		{name: "page size", mod: func(c *deletes.Config) { c.PageSize = 10001 }, wantErr: "PageSize = 10001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mod(&c)
			err := c.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
			if _, nerr := deletes.New(c); (nerr == nil) != (err == nil) {
				t.Errorf("New: %v, but Validate: %v", nerr, err)
			}
		})
	}
}

var countAnswer = regexp.MustCompile(`"count"\s*:\s*\d+`)

// TestScanner_Migrate_Aborts: a migration of a shard's delivered set of
// the layout before ranges that meets a failed listing, count or
// re-check, or a listing that disagrees with the counts around it, emits
// nothing and keeps the old set whole; the next scan migrates it.
func TestScanner_Migrate_Aborts(t *testing.T) {
	ids := docIDs("doc", 50)
	tests := []struct {
		name    string
		listing string
		fault   *esemu.Fault
		fr      *front
		wantErr string
	}{
		{name: "the point in time cannot be opened", listing: es.ListingPIT, fault: &esemu.Fault{Kind: esemu.KindPIT, Status: 503, Count: 1}},
		{name: "a scroll page fails", listing: es.ListingScroll, fault: &esemu.Fault{Kind: esemu.KindScroll, Status: 503, Count: 1}},
		{name: "a scroll page times out", listing: es.ListingScroll, fault: &esemu.Fault{Kind: esemu.KindScroll, TimedOut: true, Count: 1}},
		{name: "the count before the listing fails", listing: es.ListingPIT, fault: &esemu.Fault{Kind: esemu.KindCount, Status: 503, Count: 1}, wantErr: "count shard 0"},
		{name: "the listing disagrees with the counts", listing: es.ListingPIT, fr: &front{rewrite: func(path string, _ int, body []byte) []byte {
			if !strings.HasSuffix(path, "/_count") {
				return body
			}
			return countAnswer.ReplaceAll(body, []byte(`"count":47`))
		}}, wantErr: "listed 48 ids but _count said 47"},
		{name: "the re-check fails", listing: es.ListingPIT, fr: &front{fail: func(path string, body []byte) bool {
			return strings.HasSuffix(path, "/_search") && bytes.Contains(body, []byte(`"ids"`))
		}}, wantErr: "re-check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFeedFixture(t, "migrate-abort")
			f.write(ids, false, "")
			for _, id := range ids {
				f.rdb.SAdd(ctx, f.keys.Delivered(f.uuid, 0), id)
			}
			f.write(ids[10:12], true, "")
			if tt.fr != nil {
				f.through(tt.fr)
			}
			sc := f.scannerWith(func(c *deletes.Config) { c.Listing, c.PageSize = tt.listing, 10 })
			sh := f.shard(2)
			firstSight(t, sc, sh)
			if tt.fault != nil {
				if err := f.emu.InjectFault(*tt.fault); err != nil {
					t.Fatal(err)
				}
			}
			if tt.fr != nil {
				tt.fr.armed.Store(true)
			}
			res, err := sc.Scan(ctx, sh)
			if !errors.Is(err, deletes.ErrAborted) {
				t.Fatalf("Scan = %+v, %v; want an error wrapping ErrAborted", res, err)
			}
			if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Scan: %v, want it to say %q", err, tt.wantErr)
			}
			if n, _ := f.rdb.SCard(ctx, f.keys.Delivered(f.uuid, 0)).Result(); n != int64(len(ids)) {
				t.Errorf("the old set holds %d ids after the abort, want %d", n, len(ids))
			}
			if got := f.deleteEvents(); len(got) != 0 {
				t.Errorf("the aborted migration emitted deletes %v", got)
			}
			if st := sc.Stats(); st.Aborted != 1 || st.Migrated != 0 || st.Deletes != 0 {
				t.Errorf("Stats = %+v, want Aborted 1, Migrated 0, Deletes 0", st)
			}
			if g := f.gapCounter(); g != 2 {
				t.Errorf("gap counter %d, want 2", g)
			}
			f.emu.ClearFaults()
			if tt.fr != nil {
				tt.fr.armed.Store(false)
			}
			res, err = sc.Scan(ctx, sh)
			if err != nil || res.Deleted != 2 {
				t.Fatalf("the scan after the abort: %+v, %v; want the migration's 2 deletes", res, err)
			}
			f.checkRecorded("after the migration", f.live())
		})
	}
}
