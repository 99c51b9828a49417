package deletes_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/deletes"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// feedFixture is one single-shard index on the emulator and a feed's Redis
// that has delivered it, written the way the relay writes.
type feedFixture struct {
	t     *testing.T
	emu   *esemu.Cluster
	url   string
	es    *es.Client
	rdb   *redis.Client
	keys  redisx.Keys
	store *checkpoint.Store
	uuid  string
	// metrics is the last scanner's registry.
	metrics *prometheus.Registry
}

// metric is the value of one series of the last scanner's metrics.
func (f *feedFixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	mfs, err := f.metrics.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				if !found {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	f.t.Fatalf("no series %s %v", name, labels)
	return 0
}

func newFeedFixture(t *testing.T, name string) *feedFixture {
	t.Helper()
	emu, err := esemu.New(esemu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emu.Close() })
	f := &feedFixture{t: t, emu: emu, url: emu.URL()}
	ctx := context.Background()
	if f.es, err = es.New(es.Config{URLs: []string{emu.URL()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.es.Info(ctx); err != nil {
		t.Fatal(err)
	}
	f.rdb = redistest.Start(t).Client(t)
	f.keys = redisx.NewKeys(name)
	lease, _ := redisx.NewLease(redisx.LeaseConfig{Client: f.rdb, Key: f.keys.Lease(), TTL: time.Minute})
	if ok, err := lease.TryAcquire(ctx); !ok || err != nil {
		t.Fatalf("lease: %v %v", ok, err)
	}
	if f.store, err = checkpoint.New(checkpoint.Config{Client: f.rdb, Keys: f.keys, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	f.rdb.HSet(ctx, f.keys.Meta(), "created", "test") // a feed's state exists
	f.do("PUT", "/docs", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)
	st, err := f.es.Stats(ctx, []string{"docs"})
	if err != nil {
		t.Fatal(err)
	}
	f.uuid = st["docs"].UUID
	return f
}

func (f *feedFixture) do(method, path, body string) {
	f.t.Helper()
	req, _ := newRequest(method, f.url+path, body)
	resp, err := httpClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		f.t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
	}
}

// write indexes (or, with deleted, deletes) ids; routing, when not empty,
// routes every one of them.
func (f *feedFixture) write(ids []string, deleted bool, routing string) {
	f.t.Helper()
	var b strings.Builder
	r := ""
	if routing != "" {
		r = fmt.Sprintf(",\"routing\":%q", routing)
	}
	for _, id := range ids {
		if deleted {
			fmt.Fprintf(&b, "{\"delete\":{\"_id\":%q%s}}\n", id, r)
		} else {
			fmt.Fprintf(&b, "{\"index\":{\"_id\":%q%s}}\n{\"n\":1}\n", id, r)
		}
	}
	f.do("POST", "/docs/_bulk?refresh=true", b.String())
}

// live lists the index's documents (id, routing, seq no).
func (f *feedFixture) live() []checkpoint.Doc {
	f.t.Helper()
	var out []checkpoint.Doc
	if _, err := f.es.ListShard(context.Background(), "docs", 0, "", 1000, es.ListingAuto, func(refs []es.DocRef) error {
		for _, r := range refs {
			out = append(out, checkpoint.Doc{ID: r.ID, Routing: r.Routing, SeqNo: r.SeqNo})
		}
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// deliver records docs as the relay's commits do.
func (f *feedFixture) deliver(docs []checkpoint.Doc) {
	f.t.Helper()
	id := checkpoint.ShardID{IndexUUID: f.uuid, Shard: 0}
	if err := f.store.Commit(context.Background(), checkpoint.Batch{Delivered: map[checkpoint.ShardID][]checkpoint.Doc{id: docs}}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *feedFixture) maxSeqNo() int64 {
	f.t.Helper()
	st, err := f.es.Stats(context.Background(), []string{"docs"})
	if err != nil {
		f.t.Fatal(err)
	}
	sc, _ := st["docs"].Shard(0)
	return sc.MaxSeqNo
}

func (f *feedFixture) scanner() *deletes.Scanner {
	f.t.Helper()
	return f.scannerWith(nil)
}

// scan runs a scan that is due (a scanner's first sight of a shard only
// starts its interval).
func (f *feedFixture) scan(sc *deletes.Scanner, gap int64) deletes.Result {
	f.t.Helper()
	sh := deletes.Shard{Index: "docs", Target: "docs", UUID: f.uuid, Shard: 0, Checkpoint: f.maxSeqNo(), Gap: gap, Origin: -1}
	if _, err := sc.Scan(context.Background(), sh); err != nil {
		f.t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	res, err := sc.Scan(context.Background(), sh)
	if err != nil {
		f.t.Fatalf("Scan: %v", err)
	}
	return res
}

// deleteEvents returns the stream's delete events, id -> routing, failing
// on an id deleted twice.
func (f *feedFixture) deleteEvents() map[string]string {
	f.t.Helper()
	msgs, err := f.rdb.XRange(context.Background(), f.keys.Events(), "-", "+").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range msgs {
		e, err := redisx.ParseEvent(m)
		if err != nil {
			f.t.Fatal(err)
		}
		if e.Op != redisx.OpDelete {
			continue
		}
		if _, dup := out[e.ID]; dup {
			f.t.Errorf("%q deleted twice", e.ID)
		}
		out[e.ID] = e.Routing
	}
	return out
}

// checkRecorded fails unless the feed's delivered ranges hold exactly
// want, with counts that match the ranges, and nothing of the old layout.
func (f *feedFixture) checkRecorded(when string, want []checkpoint.Doc) {
	f.t.Helper()
	ctx := context.Background()
	id := checkpoint.ShardID{IndexUUID: f.uuid, Shard: 0}
	got, err := checkpoint.ReadDelivered(ctx, f.rdb, f.keys, id)
	if err != nil {
		f.t.Fatalf("%s: %v", when, err)
	}
	cmp := func(a, b checkpoint.Doc) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(got, cmp)
	want = slices.Clone(want)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		f.t.Errorf("%s: recorded %d docs, want the %d live ones\n got %v\nwant %v", when, len(got), len(want), got, want)
	}
	counts, total, err := checkpoint.RangeCounts(ctx, f.rdb, f.keys, id)
	if err != nil {
		f.t.Fatal(err)
	}
	var sum int64
	for r, n := range counts {
		hlen, _ := f.rdb.HLen(ctx, f.keys.DeliveredRange(f.uuid, 0, r)).Result()
		if hlen != n {
			f.t.Errorf("%s: range %d holds %d ids, its count says %d", when, r, hlen, n)
		}
		sum += n
	}
	if sum != total || total != int64(len(want)) {
		f.t.Errorf("%s: counts sum to %d, total %d, want %d", when, sum, total, len(want))
	}
	for _, key := range []string{f.keys.Delivered(f.uuid, 0), f.keys.Routing(f.uuid, 0), f.keys.Scan(f.uuid, 0)} {
		if n, _ := f.rdb.Exists(ctx, key).Result(); n != 0 {
			f.t.Errorf("%s: %s still exists", when, key)
		}
	}
}

func docIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ids
}

// TestScanner_LocalizedScan: 2,000 delivered documents, then 6 deletes
// and 6 updates (each moving its document to a later range, and one
// deleted after its update). The scan emits exactly the 7 deletes, removes
// the 5 stale entries of the other updates with no event, reads only the
// ranges that changed and lists no id; the ranges then hold exactly the
// live documents. A second scan finds nothing.
func TestScanner_LocalizedScan(t *testing.T) {
	f := newFeedFixture(t, "localized")
	ids := docIDs("doc", 2000)
	f.write(ids, false, "")
	f.deliver(f.live())
	deleted := []string{ids[3], ids[400], ids[401], ids[999], ids[1500], ids[1999]}
	updated := []string{ids[10], ids[700], ids[701], ids[1200], ids[1800], ids[1600]}
	f.write(deleted, true, "")
	f.write(updated, false, "")
	// The relay reads the updates at their new seq nos.
	var moved []checkpoint.Doc
	for _, d := range f.live() {
		if slices.Contains(updated, d.ID) {
			moved = append(moved, d)
		}
	}
	f.deliver(moved)
	f.write([]string{ids[1600]}, true, "") // updated, delivered, then deleted
	sc := f.scanner()
	res := f.scan(sc, 13)
	want := append(slices.Clone(deleted), ids[1600])
	got := f.deleteEvents()
	if res.Deleted != len(want) || len(got) != len(want) {
		t.Errorf("scan deleted %d (stream: %v), want %d: %v", res.Deleted, got, len(want), want)
	}
	for _, id := range want {
		if _, ok := got[id]; !ok {
			t.Errorf("no delete for %s", id)
		}
	}
	f.checkRecorded("after the scan", f.live())
	st := sc.Stats()
	if st.ListedIDs != 0 || st.Listings != 0 || st.Localized != 1 {
		t.Errorf("stats %+v: want a localized scan that lists no id", st)
	}
	// Changed ranges: 6 of the deletes, 6 of the old versions, at most 2
	// holding the new versions and the last delete.
	if st.RangesDiffered > 14 || st.RangesDiffered < 7 || st.SeqNosRead > 14*deletes.K || st.StaleRemoved != 5 {
		t.Errorf("stats %+v: want 7..14 ranges read, at most %d seq nos, 5 stale entries", st, 14*deletes.K)
	}
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"escf_delete_listed_ids_total", nil, 0},
		{"escf_delete_ranges_total", []string{"result", "compared"}, float64(st.RangesCompared)},
		{"escf_delete_ranges_total", []string{"result", "differed"}, float64(st.RangesDiffered)},
		{"escf_delete_seqnos_read_total", nil, float64(st.SeqNosRead)},
		{"escf_delete_stale_entries_total", nil, 5},
		{"escf_delete_scan_requests_total", nil, float64(st.Requests)},
		{"escf_delete_scan_cluster_seconds_total", nil, st.ClusterTime.Seconds()},
		{"escf_delete_scans_total", []string{"result", "localized"}, 1},
		{"escf_delete_scans_total", []string{"result", "listed"}, 0},
		{"escf_deletes_found_total", nil, 7},
	} {
		if got := f.metric(m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %g, want %g", m.name, m.labels, got, m.want)
		}
	}
	if st.RangesCompared < 30 { // 2,000 docs and 6 updates: 32 ranges
		t.Errorf("ranges compared %d, want the shard's 32", st.RangesCompared)
	}
	if res := f.scan(sc, 1); res.Deleted != 0 {
		t.Errorf("the second scan deleted %d", res.Deleted)
	}
	if st := sc.Stats(); st.SavedByCount != 2 || st.Localized != 1 {
		t.Errorf("the second scan (run twice): %+v, want SavedByCount 2 (the ranges are exact again), Localized still 1", st)
	}
}

// TestScanner_MigratesOldSets: a feed written before delivered ranges
// (one set of ids and a routing hash per shard) is moved into ranges by
// its first scan, which emits the deletes of the ids gone since, each once
// and with its routing, including one also delivered again after the
// upgrade; ids updated since land at their new seq nos. A shard with no
// gap (append-only) is migrated too.
func TestScanner_MigratesOldSets(t *testing.T) {
	for _, gap := range []int64{0, 4} {
		t.Run(fmt.Sprintf("gap_%d", gap), func(t *testing.T) {
			f := newFeedFixture(t, fmt.Sprintf("migrate-%d", gap))
			ctx := context.Background()
			plain := docIDs("plain", 300)
			routed := docIDs("routed", 20)
			f.write(plain, false, "")
			f.write(routed, false, "user-7")
			// The old version's state: every id in the set, the routed
			// ones in the routing hash.
			for _, id := range append(slices.Clone(plain), routed...) {
				f.rdb.SAdd(ctx, f.keys.Delivered(f.uuid, 0), id)
			}
			for _, id := range routed {
				f.rdb.HSet(ctx, f.keys.Routing(f.uuid, 0), id, "user-7")
			}
			var want []string
			if gap > 0 {
				want = []string{plain[5], plain[250], routed[3]}
				f.write(want[:2], true, "")
				f.write(want[2:], true, "user-7")
				f.write([]string{plain[7]}, false, "") // updated since
				// Delivered again by the new version, then deleted.
				f.write([]string{plain[9]}, false, "")
				for _, d := range f.live() {
					if d.ID == plain[9] {
						f.deliver([]checkpoint.Doc{d})
					}
				}
				f.write([]string{plain[9]}, true, "")
				want = append(want, plain[9])
			}
			sc := f.scanner()
			res := f.scan(sc, gap)
			got := f.deleteEvents()
			if res.Deleted != len(want) || len(got) != len(want) {
				t.Errorf("scan deleted %d (stream: %v), want %v", res.Deleted, got, want)
			}
			for _, id := range want {
				r, ok := got[id]
				if !ok {
					t.Errorf("no delete for %s", id)
				}
				if wantR := map[bool]string{true: "user-7"}[strings.HasPrefix(id, "routed")]; r != wantR {
					t.Errorf("delete of %s has routing %q, want %q", id, r, wantR)
				}
			}
			f.checkRecorded("after the migration", f.live())
			if st := sc.Stats(); st.Migrated != 1 || st.ListedIDs != int64(len(f.live())) {
				t.Errorf("stats %+v: want one migration that listed the %d live ids", st, len(f.live()))
			}
			if got := f.metric("escf_delete_listed_ids_total"); got != float64(len(f.live())) {
				t.Errorf("escf_delete_listed_ids_total = %g, want %d", got, len(f.live()))
			}
			if got := f.metric("escf_delete_scans_total", "result", "migrated"); got != 1 {
				t.Errorf(`escf_delete_scans_total{result="migrated"} = %g, want 1`, got)
			}
			if gap > 0 {
				g, _ := f.rdb.HGet(ctx, f.keys.Checkpoints(), redisx.GapField(f.uuid, 0)).Int64()
				if g != -gap {
					t.Errorf("gap counter moved by %d, want -%d (cleared)", g, gap)
				}
			}
		})
	}
}

// TestScanner_DeleteDuringTheScan: a document with a stale entry (moved to
// a later range by an update) is deleted after the scan's histogram and
// before its re-check. The scan finds it gone through the stale entry, and
// must also remove its current entry, live when the seq nos were read,
// whether its range did not differ then or did (another delete in it):
// otherwise the next scan deletes it a second time.
func TestScanner_DeleteDuringTheScan(t *testing.T) {
	for _, neighbour := range []bool{false, true} {
		t.Run("current entry's range differs "+strconv.FormatBool(neighbour), func(t *testing.T) {
			f := newFeedFixture(t, "during-"+strconv.FormatBool(neighbour))
			ids := docIDs("doc", 300)
			f.write(ids, false, "")
			f.deliver(f.live())
			f.write([]string{ids[0]}, false, "") // moves doc-0000 from range 0 to range 4
			f.deliver(f.live()[299:])
			if last := f.live()[299]; last.ID != ids[0] || checkpoint.Range(last.SeqNo) == 0 {
				t.Fatalf("setup: the update is %+v, want %s in a later range", last, ids[0])
			}
			if neighbour {
				f.write([]string{ids[260]}, true, "") // makes range 4 differ too
			}
			// The scanner's cluster: the emulator, behind a proxy that deletes
			// doc-0000 just before the first re-check (an ids query) goes through.
			target, _ := url.Parse(f.url)
			var once sync.Once
			proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
				r := pr.Out
				if strings.HasSuffix(r.URL.Path, "/_search") && r.Body != nil {
					body, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(body))
					if bytes.Contains(body, []byte(`"ids"`)) {
						once.Do(func() { f.write([]string{ids[0]}, true, "") })
					}
				}
				pr.SetURL(target)
			}}
			front := httptest.NewServer(proxy)
			t.Cleanup(front.Close)
			var err error
			if f.es, err = es.New(es.Config{URLs: []string{front.URL}}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.es.Info(context.Background()); err != nil {
				t.Fatal(err)
			}
			sc := f.scanner()
			want := 1
			if neighbour {
				want = 2
			}
			if res := f.scan(sc, 1); res.Deleted != want {
				t.Fatalf("the scan deleted %d, want %d", res.Deleted, want)
			}
			f.checkRecorded("after the scan", f.live())
			// The relay reads past the delete (a gap) and scans again.
			if res := f.scan(sc, 1); res.Deleted != 0 {
				t.Errorf("the next scan deleted %d again", res.Deleted)
			}
			if got := f.deleteEvents(); len(got) != want {
				t.Errorf("delete events %v, want %d", got, want)
			}
		})
	}
}
