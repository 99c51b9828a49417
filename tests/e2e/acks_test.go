package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// ackLog records what a real cluster acknowledged to the writers, for the
// audit of a real cluster (auditAcks), which has no op history: an
// acknowledged write is an op that exists; a write without an answer (a
// killed or paused node) may or may not exist.
type ackLog struct {
	mu sync.Mutex
	// acked holds every (index, id, seq_no, primary_term) the cluster
	// acknowledged with a 2xx, for index, update and delete alike.
	acked map[ackKey]bool
	// bySeq lists, per index and seq_no, the acknowledged ops (to tell an
	// event of a discarded op: another op acknowledged at its seq_no under
	// another term or id).
	bySeq map[string]map[int64][]ackKey
	// uncertain counts, per index/id, the writes that got no definite
	// answer.
	uncertain map[string]int
	// writes counts every write sent; written holds their ids.
	writes  int
	written map[string]bool
}

type ackKey struct {
	index string
	id    string
	seq   int64
	term  int64
}

func newAckLog() *ackLog {
	return &ackLog{acked: map[ackKey]bool{}, bySeq: map[string]map[int64][]ackKey{}, uncertain: map[string]int{}, written: map[string]bool{}}
}

// writeResult is the part of a write's (or a bulk item's) answer the log
// reads.
type writeResult struct {
	Index  string `json:"_index"`
	ID     string `json:"_id"`
	SeqNo  *int64 `json:"_seq_no"`
	Term   *int64 `json:"_primary_term"`
	Status int    `json:"status"`
	Result string `json:"result"`
}

// record takes the answer of a write of ids to index: status 0 means no
// answer. A nil log records nothing.
func (l *ackLog) record(index string, body []byte, ids []string, status int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes += len(ids)
	for _, id := range ids {
		l.written[id] = true // by id: a write to an alias lands in a backing index
	}
	var results []writeResult
	var bulk struct {
		Items []map[string]writeResult `json:"items"`
	}
	if status >= 200 && status < 300 && json.Unmarshal(body, &bulk) == nil && bulk.Items != nil {
		for _, it := range bulk.Items {
			for _, r := range it {
				results = append(results, r)
			}
		}
	} else if status >= 200 && status < 300 {
		var r writeResult
		if json.Unmarshal(body, &r) == nil {
			r.Status = status
			results = append(results, r)
		}
	}
	answered := map[string]bool{}
	for _, r := range results {
		if r.SeqNo == nil || r.Term == nil || r.Status >= 300 && r.Result != "not_found" {
			continue
		}
		ix := r.Index
		if ix == "" {
			ix = index
		}
		k := ackKey{ix, r.ID, *r.SeqNo, *r.Term}
		l.acked[k] = true
		if l.bySeq[ix] == nil {
			l.bySeq[ix] = map[int64][]ackKey{}
		}
		l.bySeq[ix][k.seq] = append(l.bySeq[ix][k.seq], k)
		answered[r.ID] = true
	}
	for _, id := range ids {
		if !answered[id] {
			l.uncertain[index+"/"+id]++
		}
	}
}

// ackOracle judges events by what a real cluster acknowledged (auditAcks).
type ackOracle struct {
	acks *ackLog
	// deleted holds the ids a writer deleted (answered or not).
	deleted map[string]bool
	// shardOf is each document's shard (index/id), from the events: a
	// document's ops all land in one shard.
	shardOf map[string]int
	// written holds every id a writer sent a write of.
	written map[string]bool
	// unconfirmed counts upserts of writes that got no answer: no ack
	// confirms them and none contradicts them.
	unconfirmed *int
}

func (o ackOracle) wrongUpsert(e redisx.Event) string {
	if o.acks.acked[ackKey{e.Index, e.ID, e.SeqNo, e.PrimaryTerm}] {
		return ""
	}
	for _, a := range o.acks.bySeq[e.Index][e.SeqNo] {
		if sh, ok := o.shardOf[a.index+"/"+a.id]; ok && sh == e.Shard {
			return fmt.Sprintf("the cluster acknowledged %s at this seq no under term %d: the event's op was discarded", a.id, a.term)
		}
	}
	if !o.written[e.ID] {
		return "no writer ever wrote this document; " + o.describe(e.ID)
	}
	// A write the engine carried out more than once: when a node dies
	// under a bulk request, the coordinating node sends the shard request
	// again, the primary indexes the document again under a new seq no,
	// and the writer gets one of the answers (seen on OpenSearch 2.19: acked
	// at seq 8626, the document at 8634, same term). Nothing contradicts
	// such an op; it is counted, not judged.
	*o.unconfirmed++
	return ""
}

func (o ackOracle) deletedAfter(k docKey, _ int64) bool { return o.deleted[k.id] }

// describe lists what the cluster acknowledged of a document (for the
// audit's problems).
func (o ackOracle) describe(id string) string {
	var mine []string
	for k := range o.acks.acked {
		if k.id == id {
			mine = append(mine, fmt.Sprintf("%d/%d", k.seq, k.term))
		}
	}
	sort.Strings(mine)
	unanswered := 0
	for k, n := range o.acks.uncertain {
		if strings.HasSuffix(k, "/"+id) {
			unanswered += n
		}
	}
	return fmt.Sprintf("acknowledged seq/term of %s: %v, writes without an answer: %d, deleted by a writer: %v", id, mine, unanswered, o.deleted[id])
}

// auditAcks audits a real cluster's stream: lost and duplicated as audit
// does (against the documents the cluster holds at the end), wrong by the
// writers' acknowledgements: an upsert is wrong when another op was
// acknowledged at its seq no in its shard (a failover discarded it) or when
// no writer wrote the document; a delete is wrong when no writer deleted
// it. unconfirmed counts upserts that no acknowledgement confirms and none
// contradicts (writes without an answer, writes the engine carried out
// twice).
func auditAcks(tb testing.TB, c backend, indices []string, evs []redisx.Event, ws []*writer) (a auditResult, unconfirmed int) {
	tb.Helper()
	var acks *ackLog
	deleted := map[string]bool{}
	for _, w := range ws {
		acks = w.acks
		for _, id := range w.deleted {
			deleted[id] = true
		}
	}
	if acks == nil {
		tb.Fatal("auditAcks needs writers with an ack log")
	}
	shardOf := map[string]int{}
	for _, e := range evs {
		shardOf[e.Index+"/"+e.ID] = e.Shard
	}
	a = auditEvents(tb, c, indices, evs, ackOracle{acks: acks, deleted: deleted, shardOf: shardOf, written: acks.written, unconfirmed: &unconfirmed})
	a.Unconfirmed = unconfirmed
	return a, unconfirmed
}
