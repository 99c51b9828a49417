package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// figure is one line of docs/RELIABILITY.md: a scenario, how often its
// fault struck, and what the feed lost, duplicated or wrongly emitted.
type figure struct {
	Scenario string `json:"scenario"`
	Test     string `json:"test"`
	// Faults is how many times the fault was applied (kills, pauses,
	// restarts, injected errors).
	Faults  int `json:"faults"`
	Entries int `json:"entries"` // stream entries checked
	Docs    int `json:"docs"`    // documents in the source at the end
	// Lost, Duplicated and Wrong come from audit (or, for consumers, from
	// the target compared with the source); the goal is 0 each.
	Lost       int    `json:"lost"`
	Duplicated int    `json:"duplicated"`
	Wrong      int    `json:"wrong"`
	Note       string `json:"note,omitempty"`
}

var figuresMu sync.Mutex

// record logs the figure and, when ESCF_FIGURES names a file, appends it
// there as a JSON line (make reliability collects them into a table). Any
// loss, duplicate or wrong event fails the test.
func record(tb testing.TB, f figure) {
	tb.Helper()
	f.Test = tb.Name()
	b, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("FIGURE %s", b)
	if path := os.Getenv("ESCF_FIGURES"); path != "" {
		figuresMu.Lock()
		defer figuresMu.Unlock()
		fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			tb.Fatalf("ESCF_FIGURES: %v", err)
		}
		defer fh.Close()
		if _, err := fh.Write(append(b, '\n')); err != nil {
			tb.Fatalf("ESCF_FIGURES: %v", err)
		}
	}
	if f.Lost+f.Duplicated+f.Wrong != 0 {
		tb.Errorf("%s: %d lost, %d duplicated, %d wrong (want 0 each)", f.Scenario, f.Lost, f.Duplicated, f.Wrong)
	}
}

// auditResult counts what a stream got wrong against the cluster.
type auditResult struct {
	Entries    int
	Docs       int
	Deletes    int
	Lost       int // documents whose last state the stream does not replay to
	Duplicated int // an op delivered twice, or two deletes in a row
	Wrong      int // events for ops the cluster's history does not hold
	// Repairs counts, among the Wrong, the deletes of documents the stream
	// delivered no upsert of whose deletion the cluster's history holds:
	// false deletes of a stream that lost none of its entries, the relay's
	// repair of a stream that did (the document's upsert was in the lost
	// entries, consumers may have applied it). See allowRedundant.
	Repairs int
	// Redundant counts the Repairs allowRedundant took off Wrong: deletes
	// after a loss the relay recorded (redisx.Rollback).
	Redundant int
	// Unconfirmed counts, on a real cluster, upserts of writes that got no
	// answer: no acknowledgement confirms them, none contradicts them.
	Unconfirmed int
	Problems    []string // the first few, for the failure message
}

// allowRedundant tells false deletes from redundant ones (docs/RELIABILITY.md):
// a delete of a document the surviving stream holds no upsert of, but that
// the cluster deleted, is the relay's repair when Redis lost entries and
// the relay recorded the loss (rollbacks, the meta field
// redisx.RollbacksField): the upsert may have been in the lost entries,
// and consumers may have applied it. Such deletes are redundant, not
// wrong; without a recorded loss they stay false (Wrong).
func (a *auditResult) allowRedundant(rollbacks []redisx.Rollback) {
	if len(rollbacks) == 0 {
		return
	}
	a.Redundant = a.Repairs
	a.Wrong -= a.Repairs
}

// recordedRollbacks reads the losses the relay recorded in a feed's meta
// hash.
func recordedRollbacks(tb testing.TB, rdb redis.UniversalClient, keys redisx.Keys) []redisx.Rollback {
	tb.Helper()
	v, err := rdb.HGet(context.Background(), keys.Meta(), redisx.RollbacksField).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatal(err)
	}
	rbs, err := redisx.ParseRollbacks(v)
	if err != nil {
		tb.Fatal(err)
	}
	return rbs
}

// seenLost counts the redundant deletes of documents a reader (the tap)
// saw an upsert of in entries the final stream no longer holds: the
// deletes that made a sink that applied them exact again.
func seenLost(tap *streamTap, final []redisx.Event) map[docKey]bool {
	kept := map[string]bool{}
	for _, e := range final {
		kept[e.StreamID] = true
	}
	out := map[docKey]bool{}
	for _, e := range tap.all() {
		if !kept[e.StreamID] && e.Op == redisx.OpUpsert {
			out[docKey{e.IndexUUID, e.Shard, e.ID}] = true
		}
	}
	return out
}

func (a *auditResult) problem(format string, args ...any) {
	if len(a.Problems) < 20 {
		a.Problems = append(a.Problems, fmt.Sprintf(format, args...))
	}
}

// primaryHistory is the op history of shard n of index on its started
// primary copy (copy 0 when none is started); ok is false when the index
// has no shard n.
func primaryHistory(tb testing.TB, c *esemu.Cluster, index string, n int) (ops []esemu.Op, ok bool) {
	tb.Helper()
	st, err := c.ShardState(index, n)
	if err != nil {
		return nil, false
	}
	primary := 0
	for i, cp := range st.Copies {
		if cp.Primary && cp.Started {
			primary = i
		}
	}
	ops, err = c.History(index, n, primary)
	if err != nil {
		tb.Fatal(err)
	}
	return ops, true
}

// audit checks the events of the named indices against the cluster's own
// histories:
//   - Lost: documents whose replayed state differs from the primaries'
//     visible documents (missing, stale, or deleted but still present);
//   - Duplicated: the same (index, shard, seq_no) upsert twice, or a second
//     delete of a document with no upsert in between;
//   - Wrong: an upsert whose (seq_no, primary_term, _id) is not an index op
//     of the shard's final history (an op a failover discarded), or a
//     delete with no delete op in the history after the version last
//     delivered (a false delete).
//
// Events of other indices are ignored.
func audit(tb testing.TB, c *esemu.Cluster, indices []string, evs []redisx.Event) auditResult {
	tb.Helper()
	h := historyOracle{ops: map[opKey]esemu.Op{}, deletedAt: map[docKey][]int64{}}
	for _, ix := range indices {
		uuid := indexUUID(tb, c, ix)
		for n := 0; ; n++ {
			hist, ok := primaryHistory(tb, c, ix, n)
			if !ok {
				break
			}
			for _, o := range hist {
				h.ops[opKey{uuid, n, o.SeqNo}] = o
				if o.Type == "delete" {
					k := docKey{uuid, n, o.ID}
					h.deletedAt[k] = append(h.deletedAt[k], o.SeqNo)
				}
			}
		}
	}
	return auditEvents(tb, c, indices, evs, h)
}

// opKey names an op: its shard and seq no.
type opKey struct {
	uuid  string
	shard int
	seq   int64
}

// opOracle says whether the ops behind events exist, for auditEvents.
type opOracle interface {
	// wrongUpsert returns why an upsert event is not an op that exists
	// ("" when it is).
	wrongUpsert(e redisx.Event) string
	// deletedAfter reports whether document k was deleted by an op after
	// seq no after (its last delivered upsert).
	deletedAfter(k docKey, after int64) bool
}

// historyOracle judges by the emulator's op histories.
type historyOracle struct {
	ops       map[opKey]esemu.Op
	deletedAt map[docKey][]int64
}

func (h historyOracle) wrongUpsert(e redisx.Event) string {
	o, found := h.ops[opKey{e.IndexUUID, e.Shard, e.SeqNo}]
	if !found || o.Type != "index" || o.ID != e.ID || o.PrimaryTerm != e.PrimaryTerm {
		return fmt.Sprintf("not in the shard's history (history has %+v)", o)
	}
	return ""
}

func (h historyOracle) deletedAfter(k docKey, after int64) bool {
	for _, seq := range h.deletedAt[k] {
		if seq > after {
			return true
		}
	}
	return false
}

// auditEvents is audit with the judgement of ops left to oracle: the
// emulator's histories, or a real cluster's acknowledgements.
func auditEvents(tb testing.TB, c backend, indices []string, evs []redisx.Event, oracle opOracle) auditResult {
	tb.Helper()
	var a auditResult
	uuids := map[string]bool{}
	want := map[docKey]doc{}
	for _, ix := range indices {
		uuids[indexUUID(tb, c, ix)] = true
		for k, d := range clusterDocs(tb, c, ix) {
			want[k] = d
		}
	}
	var mine []redisx.Event
	for _, e := range evs {
		if uuids[e.IndexUUID] {
			mine = append(mine, e)
		}
	}
	a.Entries, a.Docs = len(mine), len(want)
	seen := map[opKey]bool{}
	lastUpsert := map[docKey]int64{}
	lastOp := map[docKey]redisx.Op{}
	for _, e := range mine {
		k := docKey{e.IndexUUID, e.Shard, e.ID}
		switch e.Op {
		case redisx.OpUpsert:
			ok := opKey{e.IndexUUID, e.Shard, e.SeqNo}
			if seen[ok] {
				a.Duplicated++
				a.problem("duplicate upsert %v seq %d (entry %s)", k, e.SeqNo, e.StreamID)
			}
			seen[ok] = true
			if why := oracle.wrongUpsert(e); why != "" {
				a.Wrong++
				a.problem("upsert %v seq %d term %d: %s", k, e.SeqNo, e.PrimaryTerm, why)
			}
			lastUpsert[k] = e.SeqNo
		case redisx.OpDelete:
			a.Deletes++
			if lastOp[k] == redisx.OpDelete {
				a.Duplicated++
				a.problem("second delete of %v without an upsert between (entry %s)", k, e.StreamID)
			}
			u, delivered := lastUpsert[k]
			if !delivered || !oracle.deletedAfter(k, u) {
				a.Wrong++
				if !delivered && oracle.deletedAfter(k, -1) {
					a.Repairs++
					a.problem("delete of %v, deleted in the cluster, of which the stream delivered no upsert (entry %s): a repair if the stream lost entries", k, e.StreamID)
				} else {
					a.problem("false delete of %v (last delivered seq %d, delivered %v)", k, u, delivered)
				}
			}
		default:
			continue
		}
		lastOp[k] = e.Op
	}
	got := replay(mine)
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			a.Lost++
			a.problem("lost %v: stream replays %+v (present %v), cluster has %+v", k, g, ok, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			a.Lost++ // a delete the stream never carried
			more := ""
			if d, ok := oracle.(interface{ describe(id string) string }); ok {
				more = "; " + d.describe(k.id)
			}
			a.problem("lost delete of %v (stream still has seq %d%s)", k, g.seq, more)
		}
	}
	sort.Strings(a.Problems)
	return a
}

// TestAudit_CatchesWhatItClaims feeds audit streams with one fault each
// (built from the cluster's own history) and checks it counts them: the
// suite's zeros mean something only if audit can say otherwise.
func TestAudit_CatchesWhatItClaims(t *testing.T) {
	c := cluster(t, esemu.Config{Nodes: 2, OutOfOrder: true, MaxCompletionDelay: time.Second})
	createIndex(t, c, "audited", 1, 1)
	var bulk strings.Builder
	for i := 0; i < 6; i++ {
		fmt.Fprintf(&bulk, "{\"index\":{\"_index\":\"audited\",\"_id\":\"d%d\"}}\n{\"i\":%d}\n", i, i)
	}
	bulk.WriteString("{\"index\":{\"_index\":\"audited\",\"_id\":\"d0\"}}\n{\"i\":100}\n")
	bulk.WriteString("{\"delete\":{\"_index\":\"audited\",\"_id\":\"d1\"}}\n")
	mustDo(t, "POST", c.URL()+"/_bulk", bulk.String())
	uuid := indexUUID(t, c, "audited")
	hist, err := c.History("audited", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	event := func(o esemu.Op) redisx.Event {
		return redisx.Event{Op: redisx.OpUpsert, Index: "audited", IndexUUID: uuid, ID: o.ID, SeqNo: o.SeqNo,
			PrimaryTerm: o.PrimaryTerm, Version: o.Version, Source: o.Source}
	}
	var good []redisx.Event
	for _, o := range hist {
		if o.Type == "index" {
			good = append(good, event(o))
		}
	}
	del := redisx.Event{Op: redisx.OpDelete, Index: "audited", IndexUUID: uuid, ID: "d1", SeqNo: hist[len(hist)-1].SeqNo}
	good = append(good, del)
	with := func(evs ...redisx.Event) []redisx.Event { return append(append([]redisx.Event(nil), good...), evs...) }

	// A discarded op: the primary applied it, the replica had not when the
	// primary's node died.
	go func() {
		// Fails when the primary dies: that is the point.
		req, _ := http.NewRequest("PUT", c.URL()+"/audited/_doc/lost", strings.NewReader(`{"lost":true}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	node, ok := primaryAhead(t, c, "audited", 0, 5*time.Second)
	if !ok {
		t.Fatal("the primary never got ahead of its replica")
	}
	st, _ := c.ShardState("audited", 0)
	var primary int
	for i, cp := range st.Copies {
		if cp.Primary {
			primary = i
		}
	}
	before, _ := c.History("audited", 0, primary)
	discarded := event(before[len(before)-1])
	if err := c.KillNode(node); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.ShardState("audited", 0); st.DiscardedOps == 0 {
		t.Fatal("the failover discarded nothing")
	}

	// The stream without the upsert of d1, which the cluster deleted: its
	// delete is a repair after lost entries, not a false delete of d1.
	var noD1 []redisx.Event
	for _, e := range good {
		if e.Op != redisx.OpUpsert || e.ID != "d1" {
			noD1 = append(noD1, e)
		}
	}
	tests := []struct {
		name                           string
		evs                            []redisx.Event
		lost, dup, wrong, del, repairs int
	}{
		{"exact", good, 0, 0, 0, 1, 0},
		{"an upsert missing", append(append([]redisx.Event(nil), good[:2]...), good[3:]...), 1, 0, 0, 1, 0},
		{"the delete missing", good[:len(good)-1], 1, 0, 0, 0, 0},
		{"an upsert twice", with(good[2]), 0, 1, 0, 1, 0},
		{"a delete twice", with(del), 0, 1, 0, 2, 0},
		{"a false delete", with(redisx.Event{Op: redisx.OpDelete, Index: "audited", IndexUUID: uuid, ID: "d3", SeqNo: 99}), 1, 0, 1, 2, 0},
		{"a delete of a document deleted, its upsert missing", noD1, 0, 0, 1, 1, 1},
		{"a wrong primary term", func() []redisx.Event {
			evs := with()
			evs[3].PrimaryTerm++
			return evs
		}(), 0, 0, 1, 1, 0},
		{"an event for a discarded op", with(discarded), 1, 0, 1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := audit(t, c, []string{"audited"}, tt.evs)
			got := [5]int{a.Lost, a.Duplicated, a.Wrong, a.Deletes, a.Repairs}
			want := [5]int{tt.lost, tt.dup, tt.wrong, tt.del, tt.repairs}
			if got != want {
				t.Errorf("lost, duplicated, wrong, deletes, repairs = %v, want %v\n%s", got, want, strings.Join(a.Problems, "\n"))
			}
			without := a
			without.allowRedundant(nil)
			if without.Wrong != tt.wrong || without.Redundant != 0 {
				t.Errorf("with no loss recorded: wrong %d, redundant %d; want %d, 0", without.Wrong, without.Redundant, tt.wrong)
			}
			a.allowRedundant([]redisx.Rollback{{After: "0-0", Before: "1-0", Commits: 1}})
			if got, want := a.Wrong, tt.wrong-tt.repairs; got != want || a.Redundant != tt.repairs {
				t.Errorf("with a loss recorded: wrong %d, redundant %d; want %d, %d", got, a.Redundant, want, tt.repairs)
			}
		})
	}
}
