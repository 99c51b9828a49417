package esemu_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// The property tests drive the emulator the way a change feed's cluster is
// driven in the end-to-end suites (concurrent writers over HTTP, nodes killed
// and restarted) and check the promises the relay's cursor relies on
// (DESIGN.md section 2, FACTS.md "Global checkpoint"):
//
//	(a) gcp <= local checkpoint of every started in-sync copy;
//	(b) the primary's gcp never decreases (ShardState and _stats);
//	(c) after a _refresh, every op <= gcp is visible on every started copy;
//	(d) range _seq_no (cp, gcp] sorted by _seq_no on any copy returns exactly
//	    the live docs whose latest op is in (cp, gcp];
//	(e) no op <= gcp is ever lost or changed, by a failover or otherwise;
//
// plus, once writers stop and every node is back: the gcp reaches the max
// seq no on every copy, copies hold identical histories, every acknowledged
// write is in the history with the seq/term it was acknowledged with, every
// op in the history was acknowledged or belongs to a request that failed,
// versions grow per id, and a simulated relay (cursor per shard, pages of
// search_after) has delivered the final state of every live document.
//
// A run prints its seed; ESEMU_PROPERTY_SEED=<seed> repeats its random
// choices (thread scheduling still varies). ESEMU_PROPERTY_LONG=1 runs a
// bigger workload.

const propIndex = "prop"

// propSize is how much one property run does.
type propSize struct {
	name     string
	shards   int
	writers  int
	rounds   int
	roundDur time.Duration
	ids      int // key space: writers pick ids among this many
}

func propSizeFor(tb testing.TB) propSize {
	tb.Helper()
	if os.Getenv("ESEMU_PROPERTY_LONG") == "1" {
		return propSize{name: "long", shards: 5, writers: 8, rounds: 8, roundDur: 5 * time.Second, ids: 2000}
	}
	if testing.Short() {
		return propSize{name: "short", shards: 3, writers: 4, rounds: 2, roundDur: 600 * time.Millisecond, ids: 150}
	}
	return propSize{name: "normal", shards: 3, writers: 8, rounds: 3, roundDur: time.Second, ids: 300}
}

func propSeed(tb testing.TB) int64 {
	tb.Helper()
	if v := os.Getenv("ESEMU_PROPERTY_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatalf("ESEMU_PROPERTY_SEED=%q: %v", v, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

// propClient is a small ES REST client over the emulator's HTTP API.
type propClient struct {
	base string
	hc   *http.Client
}

func propNewClient(base string) *propClient {
	tr := &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &propClient{base: base, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

func (c *propClient) close() { c.hc.CloseIdleConnections() }

// do sends one request and returns the status and the whole body.
func (c *propClient) do(method, path, ctype string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// json sends in as JSON and decodes a 2xx answer into out; any other status
// is an error carrying the body.
func (c *propClient) json(method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	st, b, err := c.do(method, path, "application/json", body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if st < 200 || st > 299 {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, st, propTrim(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w: %s", method, path, err, propTrim(b))
		}
	}
	return nil
}

func propTrim(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "…"
	}
	return string(b)
}

// propWriteResp is a document write response or a bulk item.
type propWriteResp struct {
	ID      string          `json:"_id"`
	Version int64           `json:"_version"`
	Result  string          `json:"result"`
	SeqNo   *int64          `json:"_seq_no"`
	Term    *int64          `json:"_primary_term"`
	Status  int             `json:"status"`
	Error   json.RawMessage `json:"error"`
}

type propBulkResp struct {
	Errors bool                       `json:"errors"`
	Items  []map[string]propWriteResp `json:"items"`
}

type propHit struct {
	ID      string          `json:"_id"`
	SeqNo   int64           `json:"_seq_no"`
	Term    int64           `json:"_primary_term"`
	Version int64           `json:"_version"`
	Routing string          `json:"_routing"`
	Source  json.RawMessage `json:"_source"`
	Sort    []int64         `json:"sort"`
}

type propSearchResp struct {
	TimedOut bool `json:"timed_out"`
	Shards   struct {
		Total      int `json:"total"`
		Successful int `json:"successful"`
		Failed     int `json:"failed"`
	} `json:"_shards"`
	Hits struct {
		Hits []propHit `json:"hits"`
	} `json:"hits"`
}

type propStatsResp struct {
	Indices map[string]struct {
		Shards map[string][]struct {
			Routing struct {
				State   string `json:"state"`
				Primary bool   `json:"primary"`
				Node    string `json:"node"`
			} `json:"routing"`
			SeqNo struct {
				MaxSeqNo         int64 `json:"max_seq_no"`
				LocalCheckpoint  int64 `json:"local_checkpoint"`
				GlobalCheckpoint int64 `json:"global_checkpoint"`
			} `json:"seq_no"`
		} `json:"shards"`
	} `json:"indices"`
}

// search runs one search on shard n (preference=_shards:n) and refuses a
// response with failed shards or timed_out, as the relay must.
func (c *propClient) search(index string, n int, body any) (propSearchResp, error) {
	var resp propSearchResp
	if err := c.json("POST", fmt.Sprintf("/%s/_search?preference=_shards:%d", index, n), body, &resp); err != nil {
		return resp, err
	}
	if resp.Shards.Failed != 0 || resp.TimedOut || resp.Shards.Successful != 1 {
		return resp, fmt.Errorf("search on shard %d: _shards %+v timed_out %v", n, resp.Shards, resp.TimedOut)
	}
	return resp, nil
}

// pages reads range _seq_no (cp, gcp] on shard n the way the relay does:
// sorted by _seq_no, search_after the last hit, until a short page.
func (c *propClient) pages(index string, n int, cp, gcp int64, size int) ([]propHit, int, error) {
	var all []propHit
	after := int64(-2)
	npages := 0
	for {
		body := map[string]any{
			"query":               map[string]any{"range": map[string]any{"_seq_no": map[string]any{"gt": cp, "lte": gcp}}},
			"sort":                []any{map[string]any{"_seq_no": "asc"}},
			"seq_no_primary_term": true,
			"version":             true,
			"track_total_hits":    false,
			"size":                size,
		}
		if after > -2 {
			body["search_after"] = []any{after}
		}
		resp, err := c.search(index, n, body)
		if err != nil {
			return all, npages, err
		}
		npages++
		hits := resp.Hits.Hits
		all = append(all, hits...)
		if len(hits) < size {
			return all, npages, nil
		}
		after = hits[len(hits)-1].SeqNo
	}
}

// statsGCP reads every shard's primary global checkpoint from
// _stats/get?level=shards, as the relay does.
func (c *propClient) statsGCP(index string) (map[int]int64, error) {
	var st propStatsResp
	if err := c.json("GET", "/"+index+"/_stats/get?level=shards", nil, &st); err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for num, copies := range st.Indices[index].Shards {
		n, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("_stats shard key %q", num)
		}
		for _, cp := range copies {
			if cp.Routing.Primary {
				if _, dup := out[n]; dup {
					return nil, fmt.Errorf("_stats lists two primaries for shard %d", n)
				}
				out[n] = cp.SeqNo.GlobalCheckpoint
			}
		}
	}
	return out, nil
}

// propAck is a write a writer was acknowledged for: it consumed a seq no.
type propAck struct {
	id      string
	seq     int64
	term    int64
	kind    string // "index" or "delete"
	version int64
	via     string
}

// propLedger records what the writers were told.
type propLedger struct {
	mu       sync.Mutex
	acked    []propAck
	unknown  map[string]int // id -> writes that failed: they may or may not have happened
	requests int
	items    int
	noops    int // conflicts, missing docs for update, noop updates: no seq consumed
	failures int
	byVia    map[string]int
}

// propRun is one property run: the cluster, the writers' ledger and the
// checkers' per-shard state.
type propRun struct {
	tb       testing.TB
	seed     int64
	size     propSize
	replicas int
	c        *esemu.Cluster
	cl       *propClient
	ledger   propLedger
	track    []*propTrack

	errs         atomic.Int64
	stopWrites   atomic.Bool
	kills        atomic.Int64
	restarts     atomic.Int64
	relayPages   atomic.Int64
	checks       atomic.Int64
	inconclusive atomic.Int64
}

// propTrack is what the checkers remember about one shard.
type propTrack struct {
	mu        sync.Mutex
	committed []esemu.Op // seq -> op, for every seq <= the highest gcp seen
	lastGCP   int64      // ShardState, read under mu
	lastStats int64      // _stats, checker goroutine only

	// the simulated relay (checker goroutine, then the quiesce check)
	cp        int64
	delivered map[string]propHit
}

func (r *propRun) failf(format string, args ...any) {
	r.tb.Helper()
	n := r.errs.Add(1)
	if n > 25 {
		return
	}
	r.tb.Errorf("[seed %d] "+format, append([]any{r.seed}, args...)...)
}

func (r *propRun) failed() bool { return r.errs.Load() > 0 }

// propRoutingOf is the fixed routing of an id: ids "r<k>" are written with
// routing "g<k%7>", ids "d<k>" without routing.
func propRoutingOf(id string) string {
	if strings.HasPrefix(id, "r") {
		k, _ := strconv.Atoi(id[1:])
		return "g" + strconv.Itoa(k%7)
	}
	return ""
}

func (r *propRun) pickID(rng *rand.Rand) string {
	k := rng.Intn(r.size.ids)
	if k%3 == 0 {
		return "r" + strconv.Itoa(k)
	}
	return "d" + strconv.Itoa(k)
}

func propDocPath(api, id string, refresh bool) string {
	p := "/" + propIndex + "/" + api + "/" + id
	var q []string
	if rt := propRoutingOf(id); rt != "" {
		q = append(q, "routing="+rt)
	}
	if refresh {
		q = append(q, "refresh=true")
	}
	if len(q) > 0 {
		p += "?" + strings.Join(q, "&")
	}
	return p
}

// record classifies one write outcome into the ledger.
func (r *propRun) record(via, id string, status int, wr propWriteResp, transportErr error) {
	l := &r.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byVia[via]++
	switch {
	case transportErr != nil:
		l.unknown[id]++
		l.failures++
	case wr.SeqNo != nil && wr.Result != "noop" && wr.Result != "":
		if wr.ID != id {
			r.failf("%s of %q answered for id %q", via, id, wr.ID)
		}
		kind := "index"
		if wr.Result == "deleted" || wr.Result == "not_found" {
			kind = "delete"
		}
		term := int64(0)
		if wr.Term != nil {
			term = *wr.Term
		}
		l.acked = append(l.acked, propAck{id: id, seq: *wr.SeqNo, term: term, kind: kind, version: wr.Version, via: via})
	case wr.Result == "noop" || status == http.StatusConflict || status == http.StatusNotFound:
		l.noops++
	case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests || status >= 500:
		l.unknown[id]++
		l.failures++
	default:
		r.failf("%s of %q: unexpected HTTP %d %+v", via, id, status, wr)
	}
}

func (r *propRun) single(via, method, path, id string, body []byte) {
	r.ledger.mu.Lock()
	r.ledger.requests++
	r.ledger.mu.Unlock()
	st, b, err := r.cl.do(method, path, "application/json", body)
	var wr propWriteResp
	if err == nil {
		if jerr := json.Unmarshal(b, &wr); jerr != nil {
			r.failf("%s %s: undecodable answer HTTP %d: %s", method, path, st, propTrim(b))
			return
		}
		if wr.Status == 0 {
			wr.Status = st
		}
	}
	r.record(via, id, st, wr, err)
}

func (r *propRun) writer(w int, rng *rand.Rand) {
	for n := 0; !r.stopWrites.Load() && !r.failed(); n++ {
		id := r.pickID(rng)
		refresh := rng.Intn(30) == 0
		switch x := rng.Intn(100); {
		case x < 25:
			body, _ := json.Marshal(map[string]any{"w": w, "n": n, "x": rng.Int63()})
			r.single("index", "PUT", propDocPath("_doc", id, refresh), id, body)
		case x < 40:
			body, _ := json.Marshal(map[string]any{"doc": map[string]any{"u": n, "w": w}, "doc_as_upsert": rng.Intn(4) != 0})
			r.single("update", "POST", propDocPath("_update", id, refresh), id, body)
		case x < 50:
			r.single("delete", "DELETE", propDocPath("_doc", id, refresh), id, nil)
		default:
			r.bulk(w, n, rng, refresh)
		}
	}
}

// bulk sends 1..40 mixed actions. Half the bulks carry routing per item, the
// others put every item in one routing group and pass it as ?routing=.
func (r *propRun) bulk(w, n int, rng *rand.Rand, refresh bool) {
	var buf bytes.Buffer
	var ids []string
	path := "/" + propIndex + "/_bulk"
	group := -1
	var q []string
	if rng.Intn(2) == 0 {
		group = rng.Intn(7)
		q = append(q, "routing=g"+strconv.Itoa(group))
	}
	if refresh {
		q = append(q, "refresh=true")
	}
	if len(q) > 0 {
		path += "?" + strings.Join(q, "&")
	}
	count := 1 + rng.Intn(40)
	for i := 0; i < count; i++ {
		id := r.pickID(rng)
		meta := map[string]any{"_id": id}
		if group >= 0 {
			// only ids of this routing group: k%3 == 0 and k%7 == group
			k0 := 0
			for k0%3 != 0 || k0%7 != group {
				k0++
			}
			k := k0 + 21*rng.Intn(max(1, (r.size.ids-k0+20)/21))
			if k >= r.size.ids {
				k = k0
			}
			id = "r" + strconv.Itoa(k)
			meta["_id"] = id
		} else if rt := propRoutingOf(id); rt != "" {
			meta["routing"] = rt
		}
		action := []string{"index", "index", "create", "update", "update", "delete"}[rng.Intn(6)]
		line, _ := json.Marshal(map[string]any{action: meta})
		buf.Write(line)
		buf.WriteByte('\n')
		switch action {
		case "index", "create":
			doc, _ := json.Marshal(map[string]any{"w": w, "n": n, "i": i, "x": rng.Int63()})
			buf.Write(doc)
			buf.WriteByte('\n')
		case "update":
			doc, _ := json.Marshal(map[string]any{"doc": map[string]any{"b": n, "i": i, "w": w}, "doc_as_upsert": rng.Intn(3) != 0})
			buf.Write(doc)
			buf.WriteByte('\n')
		}
		ids = append(ids, id)
	}
	r.ledger.mu.Lock()
	r.ledger.requests++
	r.ledger.items += count
	r.ledger.mu.Unlock()
	st, b, err := r.cl.do("POST", path, "application/x-ndjson", buf.Bytes())
	if err != nil {
		for _, id := range ids {
			r.record("bulk", id, 0, propWriteResp{}, err)
		}
		return
	}
	if st != http.StatusOK {
		// The whole bulk failed (e.g. an injected fault): nothing is known.
		for _, id := range ids {
			r.record("bulk", id, st, propWriteResp{}, fmt.Errorf("bulk HTTP %d", st))
		}
		return
	}
	var resp propBulkResp
	if jerr := json.Unmarshal(b, &resp); jerr != nil || len(resp.Items) != len(ids) {
		r.failf("bulk: %d items sent, answer (%v): %s", len(ids), jerr, propTrim(b))
		return
	}
	for i, item := range resp.Items {
		for _, wr := range item {
			r.record("bulk", ids[i], wr.Status, wr, nil)
		}
	}
}

// readState reads a shard's state and checks (a) and (b) on it. Readers are
// serialized per shard so "never decreases" compares reads in time order.
func (r *propRun) readState(n int, where string) (esemu.ShardState, bool) {
	tr := r.track[n]
	tr.mu.Lock()
	st, err := r.c.ShardState(propIndex, n)
	if err != nil {
		tr.mu.Unlock()
		r.failf("%s: ShardState(%d): %v", where, n, err)
		return st, false
	}
	if st.GlobalCheckpoint < tr.lastGCP {
		r.failf("(b) %s: shard %d: primary global checkpoint went down from %d to %d (term %d)",
			where, n, tr.lastGCP, st.GlobalCheckpoint, st.PrimaryTerm)
	}
	tr.lastGCP = max(tr.lastGCP, st.GlobalCheckpoint)
	tr.mu.Unlock()
	r.checks.Add(1)
	primaries := 0
	for i, c := range st.Copies {
		if !c.Started {
			continue
		}
		if c.Primary {
			primaries++
			if c.GlobalCheckpoint != st.GlobalCheckpoint {
				r.failf("%s: shard %d: the primary (copy %d) reports gcp %d but the shard's is %d", where, n, i, c.GlobalCheckpoint, st.GlobalCheckpoint)
			}
		}
		if c.InSync && st.GlobalCheckpoint > c.LocalCheckpoint {
			r.failf("(a) %s: shard %d: gcp %d is above the local checkpoint %d of in-sync copy %d (node %d, primary %v)",
				where, n, st.GlobalCheckpoint, c.LocalCheckpoint, i, c.Node, c.Primary)
		}
		if c.GlobalCheckpoint > st.GlobalCheckpoint {
			r.failf("%s: shard %d: copy %d knows gcp %d, above the primary's %d", where, n, i, c.GlobalCheckpoint, st.GlobalCheckpoint)
		}
		if c.LocalCheckpoint > c.MaxSeqNo {
			r.failf("%s: shard %d: copy %d local checkpoint %d above its max seq no %d", where, n, i, c.LocalCheckpoint, c.MaxSeqNo)
		}
	}
	if primaries != 1 {
		r.failf("%s: shard %d has %d started primaries with at most one node down: %+v", where, n, primaries, st)
	}
	if st.GlobalCheckpoint >= st.NextSeqNo {
		r.failf("%s: shard %d: gcp %d >= next seq no %d", where, n, st.GlobalCheckpoint, st.NextSeqNo)
	}
	return st, true
}

func propPrimaryIndex(st esemu.ShardState) int {
	for i, c := range st.Copies {
		if c.Primary && c.Started {
			return i
		}
	}
	return -1
}

// primaryHistory reads the primary's history with the shard state taken
// just before it, retrying when a failover happens in between.
func (r *propRun) primaryHistory(n int, where string) ([]esemu.Op, esemu.ShardState, bool) {
	for attempt := 0; attempt < 5; attempt++ {
		st, ok := r.readState(n, where)
		if !ok {
			return nil, st, false
		}
		pi := propPrimaryIndex(st)
		if pi < 0 {
			return nil, st, false
		}
		hist, err := r.c.History(propIndex, n, pi)
		if err != nil {
			r.failf("%s: History(%d, %d): %v", where, n, pi, err)
			return nil, st, false
		}
		st2, ok := r.readState(n, where)
		if !ok {
			return nil, st, false
		}
		if st2.PrimaryTerm == st.PrimaryTerm {
			return hist, st, true
		}
	}
	r.inconclusive.Add(1)
	return nil, esemu.ShardState{}, false
}

func propSameOp(a, b esemu.Op) bool {
	return a.SeqNo == b.SeqNo && a.PrimaryTerm == b.PrimaryTerm && a.Type == b.Type && a.ID == b.ID &&
		a.Version == b.Version && a.Routing == b.Routing && bytes.Equal(a.Source, b.Source)
}

func propOpString(o esemu.Op) string {
	if o.Type == "" {
		return "nothing"
	}
	return fmt.Sprintf("{seq %d term %d %s id %q v%d routing %q}", o.SeqNo, o.PrimaryTerm, o.Type, o.ID, o.Version, o.Routing)
}

// verifyPrefix checks (e): the primary's history hist, read after a gcp of
// upTo was observed, holds every seq 0..upTo, and those ops are the ones
// recorded when they first were at or below a gcp. It records new ones.
func (r *propRun) verifyPrefix(n int, hist []esemu.Op, upTo int64, where string) bool {
	if int64(len(hist)) <= upTo {
		r.failf("(e) %s: shard %d: the primary's history has %d ops but the gcp is %d", where, n, len(hist), upTo)
		return false
	}
	for i := int64(0); i <= upTo; i++ {
		if hist[i].SeqNo != i {
			r.failf("(e) %s: shard %d: the primary's history has no op at seq %d (next is %s) below gcp %d",
				where, n, i, propOpString(hist[i]), upTo)
			return false
		}
	}
	tr := r.track[n]
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i := int64(0); i <= upTo && i < int64(len(tr.committed)); i++ {
		if !propSameOp(tr.committed[i], hist[i]) {
			r.failf("(e) %s: shard %d: op at seq %d was %s when it was at or below the gcp, now %s (gcp %d)",
				where, n, i, propOpString(tr.committed[i]), propOpString(hist[i]), upTo)
			return false
		}
	}
	for i := int64(len(tr.committed)); i <= upTo; i++ {
		tr.committed = append(tr.committed, hist[i])
	}
	return true
}

// propLatest maps each id to its op with the highest seq <= upTo.
func propLatest(hist []esemu.Op, upTo int64) map[string]esemu.Op {
	out := map[string]esemu.Op{}
	for _, o := range hist {
		if o.SeqNo > upTo {
			break
		}
		if o.Type != "noop" {
			out[o.ID] = o
		}
	}
	return out
}

// propLastSeq maps each id to the highest seq of any of its ops.
func propLastSeq(hist []esemu.Op) map[string]int64 {
	out := map[string]int64{}
	for _, o := range hist {
		if o.Type != "noop" {
			out[o.ID] = o.SeqNo
		}
	}
	return out
}

func propOpAt(hist []esemu.Op, seq int64) (esemu.Op, bool) {
	i := sort.Search(len(hist), func(i int) bool { return hist[i].SeqNo >= seq })
	if i < len(hist) && hist[i].SeqNo == seq {
		return hist[i], true
	}
	return esemu.Op{}, false
}

func propJSONEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// relayRound is one round of the simulated relay on shard n while writers
// run: gcp from _stats, refresh, pages of (cp, gcp], then cp = gcp. It checks
// (d) as far as concurrent writes allow: every hit is the latest op <= gcp of
// its id, in order, once; every live doc whose latest op <= gcp is in
// (cp, gcp] is a hit unless a newer op of that id (above the gcp) hid it.
func (r *propRun) relayRound(n int, pageSize int, where string) {
	tr := r.track[n]
	st0, ok := r.readState(n, where)
	if !ok {
		return
	}
	gcps, err := r.cl.statsGCP(propIndex)
	if err != nil {
		r.failf("%s: %v", where, err)
		return
	}
	g, ok := gcps[n]
	if !ok {
		r.failf("%s: _stats has no primary for shard %d", where, n)
		return
	}
	if g < tr.lastStats {
		r.failf("(b) %s: shard %d: _stats primary global checkpoint went down from %d to %d", where, n, tr.lastStats, g)
	}
	tr.lastStats = g
	if g <= tr.cp {
		return
	}
	if err := r.cl.json("POST", "/"+propIndex+"/_refresh", nil, nil); err != nil {
		r.failf("%s: %v", where, err)
		return
	}
	hits, npages, err := r.cl.pages(propIndex, n, tr.cp, g, pageSize)
	if err != nil {
		r.failf("(d) %s: shard %d: %v", where, n, err)
		return
	}
	r.relayPages.Add(int64(npages))
	hist, st, ok := r.primaryHistory(n, where)
	if !ok {
		return
	}
	if g > st.GlobalCheckpoint {
		r.failf("(b) %s: shard %d: _stats said gcp %d, a later ShardState %d", where, n, g, st.GlobalCheckpoint)
		return
	}
	if !r.verifyPrefix(n, hist, st.GlobalCheckpoint, where) {
		return
	}
	latest := propLatest(hist, g)
	last := propLastSeq(hist)
	seen := map[string]bool{}
	prev := tr.cp
	for _, h := range hits {
		if h.SeqNo <= prev || h.SeqNo > g {
			r.failf("(d) %s: shard %d: range (%d, %d] page returned seq %d after %d", where, n, tr.cp, g, h.SeqNo, prev)
			return
		}
		prev = h.SeqNo
		if seen[h.ID] {
			r.failf("(d) %s: shard %d: id %q returned twice in (%d, %d]", where, n, h.ID, tr.cp, g)
		}
		seen[h.ID] = true
		l, ok := latest[h.ID]
		if !ok || l.SeqNo != h.SeqNo || l.PrimaryTerm != h.Term || l.Type != "index" || l.Version != h.Version {
			r.failf("(d) %s: shard %d: hit %q seq %d term %d v%d is not the latest op <= gcp %d of that id: %s",
				where, n, h.ID, h.SeqNo, h.Term, h.Version, g, propOpString(l))
			continue
		}
		if !propJSONEqual(h.Source, l.Source) {
			r.failf("(d) %s: shard %d: hit %q seq %d _source %s, history %s", where, n, h.ID, h.SeqNo, h.Source, l.Source)
		}
		if h.Routing != l.Routing {
			r.failf("(d) %s: shard %d: hit %q _routing %q, written with %q", where, n, h.ID, h.Routing, l.Routing)
		}
		tr.delivered[h.ID] = h
	}
	for id, l := range latest {
		if l.Type != "index" || l.SeqNo <= tr.cp || seen[id] {
			continue
		}
		if last[id] > l.SeqNo {
			continue // hidden by a newer op above the gcp: a later round delivers it
		}
		if st0.PrimaryTerm != st.PrimaryTerm {
			r.inconclusive.Add(1) // that newer op may have been rolled back since
			continue
		}
		r.failf("(d) %s: shard %d: live doc %s is in (%d, %d] but no page returned it", where, n, propOpString(l), tr.cp, g)
	}
	tr.cp = g
}

// viewCheck checks (c) while writers run: after a refresh, one search (one
// copy, one atomic view) of the whole shard shows, for every id, its latest
// op <= gcp, or something newer.
func (r *propRun) viewCheck(n int, where string) {
	st0, ok := r.readState(n, where)
	if !ok {
		return
	}
	g := st0.GlobalCheckpoint
	if err := r.cl.json("POST", "/"+propIndex+"/_refresh", nil, nil); err != nil {
		r.failf("%s: %v", where, err)
		return
	}
	resp, err := r.cl.search(propIndex, n, map[string]any{
		"query": map[string]any{"match_all": map[string]any{}}, "sort": []any{"_seq_no"},
		"size": 10000, "seq_no_primary_term": true, "version": true, "track_total_hits": false, "_source": false,
	})
	if err != nil {
		r.failf("(c) %s: %v", where, err)
		return
	}
	hist, st, ok := r.primaryHistory(n, where)
	if !ok || !r.verifyPrefix(n, hist, st.GlobalCheckpoint, where) {
		return
	}
	sameTerm := st0.PrimaryTerm == st.PrimaryTerm
	latest := propLatest(hist, g)
	last := propLastSeq(hist)
	visible := map[string]propHit{}
	for _, h := range resp.Hits.Hits {
		if _, dup := visible[h.ID]; dup {
			r.failf("(c) %s: shard %d: id %q visible twice", where, n, h.ID)
		}
		visible[h.ID] = h
		if h.SeqNo <= g {
			l := latest[h.ID]
			if l.SeqNo != h.SeqNo || l.PrimaryTerm != h.Term || l.Type != "index" {
				r.failf("(c) %s: shard %d: visible %q seq %d term %d, but its latest op <= gcp %d is %s",
					where, n, h.ID, h.SeqNo, h.Term, g, propOpString(l))
			}
			continue
		}
		if o, ok := propOpAt(hist, h.SeqNo); sameTerm && (!ok || o.ID != h.ID || o.PrimaryTerm != h.Term || o.Type != "index") {
			r.failf("(c) %s: shard %d: visible %q seq %d term %d above gcp %d is not in the primary's history (%s)",
				where, n, h.ID, h.SeqNo, h.Term, g, propOpString(o))
		}
	}
	for id, l := range latest {
		if l.Type != "index" {
			continue
		}
		if _, ok := visible[id]; ok || last[id] > l.SeqNo {
			continue
		}
		if !sameTerm {
			r.inconclusive.Add(1)
			continue
		}
		r.failf("(c) %s: shard %d: %s is at or below gcp %d but not visible after a refresh", where, n, propOpString(l), g)
	}
}

// checker samples the invariants until stop is closed.
func (r *propRun) checker(stop <-chan struct{}, rng *rand.Rand) {
	for i := 0; !r.failed(); i++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(rng.Intn(3)) * time.Millisecond):
		}
		n := rng.Intn(r.size.shards)
		where := fmt.Sprintf("while writing (check %d)", i)
		switch i % 3 {
		case 0:
			r.relayRound(n, []int{1, 7, 50, 500}[rng.Intn(4)], where)
		case 1:
			r.viewCheck(n, where)
		case 2:
			r.checkCopies(n, where)
		}
	}
}

// propSnapshot is every shard's primary history up to its gcp, before a
// node is killed or restarted.
type propSnapshot struct {
	gcp  []int64
	term []int64
	ops  [][]esemu.Op
}

func (r *propRun) snapshot(where string) propSnapshot {
	var s propSnapshot
	for n := 0; n < r.size.shards; n++ {
		hist, st, ok := r.primaryHistory(n, where)
		if !ok {
			s.gcp, s.term, s.ops = append(s.gcp, -1), append(s.term, 0), append(s.ops, nil)
			continue
		}
		upTo := st.GlobalCheckpoint
		if int64(len(hist)) <= upTo {
			r.failf("(e) %s: shard %d history shorter than gcp %d", where, n, upTo)
			upTo = int64(len(hist)) - 1
		}
		s.gcp = append(s.gcp, st.GlobalCheckpoint)
		s.term = append(s.term, st.PrimaryTerm)
		s.ops = append(s.ops, append([]esemu.Op(nil), hist[:upTo+1]...))
	}
	return s
}

// checkSnapshot checks (e) right after a kill or restart: every op <= the
// gcp before it is in the primary's history, unchanged.
func (r *propRun) checkSnapshot(s propSnapshot, where string) {
	for n := 0; n < r.size.shards; n++ {
		hist, st, ok := r.primaryHistory(n, where)
		if !ok {
			continue
		}
		if st.GlobalCheckpoint < s.gcp[n] {
			r.failf("(b) %s: shard %d: gcp %d, below %d before", where, n, st.GlobalCheckpoint, s.gcp[n])
		}
		if st.PrimaryTerm < s.term[n] {
			r.failf("%s: shard %d: primary term went down from %d to %d", where, n, s.term[n], st.PrimaryTerm)
		}
		for _, o := range s.ops[n] {
			got, ok := propOpAt(hist, o.SeqNo)
			if !ok || !propSameOp(got, o) {
				r.failf("(e) %s: shard %d: op %s was at or below gcp %d before, the new primary (term %d) has %s",
					where, n, propOpString(o), s.gcp[n], st.PrimaryTerm, propOpString(got))
				break
			}
		}
		r.verifyPrefix(n, hist, st.GlobalCheckpoint, where)
		r.checkCopies(n, where)
	}
}

// checkCopies checks that every op a started replica holds is the primary's
// op at that seq: within a term replicas only get what the primary has, and
// after a failover the others are reset to the gcp and resynced from the new
// primary, never keeping an op it replaced. Replicas are read before the
// primary, so ops the primary gains meanwhile do not matter.
func (r *propRun) checkCopies(n int, where string) {
	st1, ok := r.readState(n, where)
	if !ok {
		return
	}
	reps := map[int][]esemu.Op{}
	for i, c := range st1.Copies {
		if c.Started && !c.Primary {
			h, err := r.c.History(propIndex, n, i)
			if err != nil {
				r.failf("%s: %v", where, err)
				return
			}
			reps[i] = h
		}
	}
	hist, st2, ok := r.primaryHistory(n, where)
	if !ok {
		return
	}
	if st2.PrimaryTerm != st1.PrimaryTerm {
		r.inconclusive.Add(1)
		return
	}
	if !r.verifyPrefix(n, hist, st2.GlobalCheckpoint, where) {
		return
	}
	for i, h := range reps {
		for _, o := range h {
			if p, ok := propOpAt(hist, o.SeqNo); !ok || !propSameOp(p, o) {
				r.failf("%s: shard %d: replica copy %d holds %s, the primary (term %d) has %s at that seq",
					where, n, i, propOpString(o), st2.PrimaryTerm, propOpString(p))
				break
			}
		}
	}
}

// chaos kills a random node and restarts it, one node down at most, so no
// shard ever loses every copy.
func (r *propRun) chaos(stop <-chan struct{}, rng *rand.Rand) {
	down := -1
	for {
		var stopping bool
		select {
		case <-stop:
			stopping = true
		case <-time.After(time.Duration(20+rng.Intn(100)) * time.Millisecond):
		}
		if stopping && down < 0 {
			return
		}
		if down < 0 {
			n := rng.Intn(3)
			where := fmt.Sprintf("kill of node %d", n)
			snap := r.snapshot("before " + where)
			if err := r.c.KillNode(n); err != nil {
				r.failf("%s: %v", where, err)
				return
			}
			r.kills.Add(1)
			r.checkSnapshot(snap, "after "+where)
			down = n
		} else {
			where := fmt.Sprintf("restart of node %d", down)
			snap := r.snapshot("before " + where)
			if err := r.c.RestartNode(down); err != nil {
				r.failf("%s: %v", where, err)
				return
			}
			r.restarts.Add(1)
			r.checkSnapshot(snap, "after "+where)
			down = -1
		}
		if rng.Intn(4) == 0 {
			r.c.SyncGlobalCheckpoints()
		}
		if stopping {
			return
		}
	}
}

// quiesce checks everything exactly once writers stopped and every node is
// back: nothing runs concurrently with it.
func (r *propRun) quiesce(round int, rng *rand.Rand) {
	where := fmt.Sprintf("after round %d", round)
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; n < r.size.shards; n++ {
		for {
			st, _ := r.c.ShardState(propIndex, n)
			all := true
			for _, c := range st.Copies {
				all = all && c.Started
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				r.failf("%s: shard %d copies not all started with every node up: %+v", where, n, st)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.c.SyncGlobalCheckpoints()
	if err := r.cl.json("POST", "/"+propIndex+"/_refresh", nil, nil); err != nil {
		r.failf("%s: %v", where, err)
		return
	}
	idShard := map[string]int{}
	hists := make([][]esemu.Op, r.size.shards)
	for n := 0; n < r.size.shards; n++ {
		st, ok := r.readState(n, where)
		if !ok {
			return
		}
		want := st.NextSeqNo - 1
		if st.GlobalCheckpoint != want {
			r.failf("%s: shard %d: writers stopped and every copy is started, but gcp %d != max seq no %d", where, n, st.GlobalCheckpoint, want)
		}
		for i, c := range st.Copies {
			if c.LocalCheckpoint != want || c.MaxSeqNo != want || c.GlobalCheckpoint != want || !c.InSync {
				r.failf("%s: shard %d copy %d after a gcp sync: %+v, want local/global checkpoint and max seq no %d", where, n, i, c, want)
			}
		}
		pi := propPrimaryIndex(st)
		hist, err := r.c.History(propIndex, n, pi)
		if err != nil {
			r.failf("%s: %v", where, err)
			return
		}
		hists[n] = hist
		if !r.verifyPrefix(n, hist, want, where) {
			return
		}
		for i := range st.Copies {
			if i == pi {
				continue
			}
			other, err := r.c.History(propIndex, n, i)
			if err != nil {
				r.failf("%s: %v", where, err)
				return
			}
			if len(other) != len(hist) {
				r.failf("%s: shard %d: copy %d has %d ops, the primary %d", where, n, i, len(other), len(hist))
				continue
			}
			for j := range hist {
				if !propSameOp(hist[j], other[j]) {
					r.failf("%s: shard %d: copy %d has %s where the primary has %s", where, n, i, propOpString(other[j]), propOpString(hist[j]))
					break
				}
			}
		}
		// versions grow per id; routing is the id's; an id lives in one shard
		lastOp := map[string]esemu.Op{}
		for _, o := range hist {
			if o.Type == "noop" {
				continue
			}
			if p, ok := lastOp[o.ID]; ok && o.Version <= p.Version {
				r.failf("%s: shard %d: %s after %s: version did not grow", where, n, propOpString(o), propOpString(p))
			}
			lastOp[o.ID] = o
			if o.Routing != propRoutingOf(o.ID) {
				r.failf("%s: shard %d: %s routing, want %q", where, n, propOpString(o), propRoutingOf(o.ID))
			}
			if s, ok := idShard[o.ID]; ok && s != n {
				r.failf("%s: id %q is in shards %d and %d although always written with the same routing", where, o.ID, s, n)
			}
			idShard[o.ID] = n
		}
		latest := propLatest(hist, want)
		var live []esemu.Op
		for _, o := range latest {
			if o.Type == "index" {
				live = append(live, o)
			}
		}
		sort.Slice(live, func(i, j int) bool { return live[i].SeqNo < live[j].SeqNo })
		// (c) exactly, on every copy
		for i := range st.Copies {
			vis, err := r.c.VisibleDocs(propIndex, n, i)
			if err != nil {
				r.failf("%s: %v", where, err)
				return
			}
			if len(vis) != len(live) {
				r.failf("(c) %s: shard %d copy %d shows %d docs after a refresh, the history has %d live", where, n, i, len(vis), len(live))
				continue
			}
			for j := range vis {
				if !propSameOp(vis[j], live[j]) {
					r.failf("(c) %s: shard %d copy %d shows %s where the history's live doc is %s", where, n, i, propOpString(vis[j]), propOpString(live[j]))
					break
				}
			}
		}
		// (d) exactly, for random cursors, several times so several copies answer
		for k := 0; k < 6; k++ {
			cp := rng.Int63n(want+2) - 1
			if k == 0 {
				cp = -1
			}
			size := []int{1, 3, 100, 1000}[rng.Intn(4)]
			if size == 1 && len(live) > 300 {
				size = 100
			}
			hits, npages, err := r.cl.pages(propIndex, n, cp, want, size)
			if err != nil {
				r.failf("(d) %s: %v", where, err)
				return
			}
			r.relayPages.Add(int64(npages))
			var exp []esemu.Op
			for _, o := range live {
				if o.SeqNo > cp {
					exp = append(exp, o)
				}
			}
			if len(hits) != len(exp) {
				r.failf("(d) %s: shard %d: range (%d, %d] returned %d hits, want %d", where, n, cp, want, len(hits), len(exp))
				continue
			}
			for j, h := range hits {
				o := exp[j]
				if h.ID != o.ID || h.SeqNo != o.SeqNo || h.Term != o.PrimaryTerm || h.Version != o.Version || h.Routing != o.Routing ||
					len(h.Sort) != 1 || h.Sort[0] != o.SeqNo || !propJSONEqual(h.Source, o.Source) {
					r.failf("(d) %s: shard %d: range (%d, %d] hit %d is %+v, want %s", where, n, cp, want, j, h, propOpString(o))
					break
				}
			}
		}
		// the simulated relay catches up and has every live doc's final state
		tr := r.track[n]
		r.relayRound(n, 200, where)
		if tr.cp != want {
			r.failf("%s: shard %d: relay cursor %d after catching up, want %d", where, n, tr.cp, want)
		}
		for _, o := range live {
			d, ok := tr.delivered[o.ID]
			if !ok || d.SeqNo != o.SeqNo || d.Term != o.PrimaryTerm {
				r.failf("%s: shard %d: the relay delivered %+v for %q (ok=%v), its final state is %s", where, n, d, o.ID, ok, propOpString(o))
			}
		}
	}
	// _stats agrees on every copy
	var stats propStatsResp
	if err := r.cl.json("GET", "/"+propIndex+"/_stats/get?level=shards", nil, &stats); err != nil {
		r.failf("%s: %v", where, err)
		return
	}
	for num, copies := range stats.Indices[propIndex].Shards {
		n, _ := strconv.Atoi(num)
		want := int64(len(hists[n])) - 1
		if len(copies) != 1+r.replicas {
			r.failf("%s: _stats lists %d copies of shard %d, want %d", where, len(copies), n, 1+r.replicas)
		}
		for _, c := range copies {
			if c.SeqNo.MaxSeqNo != want || c.SeqNo.LocalCheckpoint != want || c.SeqNo.GlobalCheckpoint != want {
				r.failf("%s: _stats shard %d copy (primary %v) seq_no %+v, want all %d", where, n, c.Routing.Primary, c.SeqNo, want)
			}
		}
	}
	// every acknowledged write is in the history as acknowledged; every op
	// in the history was acknowledged or belongs to a failed request
	l := &r.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	ackedAt := map[[2]int64]propAck{}
	for _, a := range l.acked {
		n, ok := idShard[a.id]
		if !ok {
			r.failf("%s: acknowledged %s of %q (seq %d term %d via %s) is in no shard's history", where, a.kind, a.id, a.seq, a.term, a.via)
			continue
		}
		o, ok := propOpAt(hists[n], a.seq)
		if !ok || o.ID != a.id || o.PrimaryTerm != a.term || o.Type != a.kind || o.Version != a.version {
			r.failf("%s: acknowledged %s of %q (seq %d term %d v%d via %s) lost: shard %d has %s there",
				where, a.kind, a.id, a.seq, a.term, a.version, a.via, n, propOpString(o))
			continue
		}
		key := [2]int64{int64(n), a.seq}
		if prev, dup := ackedAt[key]; dup {
			r.failf("%s: shard %d seq %d acknowledged twice: %+v and %+v", where, n, a.seq, prev, a)
		}
		ackedAt[key] = a
	}
	for n, hist := range hists {
		for _, o := range hist {
			if o.Type == "noop" {
				continue
			}
			if _, ok := ackedAt[[2]int64{int64(n), o.SeqNo}]; !ok && l.unknown[o.ID] == 0 {
				r.failf("%s: shard %d: %s was never acknowledged and no write of %q failed", where, n, propOpString(o), o.ID)
			}
		}
	}
}

func propStartCluster(tb testing.TB, cfg esemu.Config) (*esemu.Cluster, *propClient) {
	tb.Helper()
	c, err := esemu.New(cfg)
	if err != nil {
		tb.Fatalf("esemu.New: %v", err)
	}
	cl := propNewClient(c.URL())
	tb.Cleanup(func() {
		cl.close()
		if err := c.Close(); err != nil {
			tb.Errorf("close emulator: %v", err)
		}
	})
	return c, cl
}

func TestProperty_ConcurrentWritesWithFailovers(t *testing.T) {
	size := propSizeFor(t)
	seed := propSeed(t)
	t.Logf("seed %d, size %s", seed, size.name)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("reproduce the random choices (thread scheduling still varies): ESEMU_PROPERTY_SEED=%d go test -race -run '%s' ./internal/esemu/", seed, t.Name())
		}
	})
	// One replica: a failover loses the ops only the old primary had. Two
	// replicas: the promoted one may lack ops the other has, which must be
	// reset to the gcp and resynced.
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			propRunWorkload(t, seed+int64(replicas), size, replicas)
		})
	}
}

func propRunWorkload(t *testing.T, seed int64, size propSize, replicas int) {
	start := time.Now()
	c, cl := propStartCluster(t, esemu.Config{Nodes: 3, OutOfOrder: true, Seed: seed, NodeLeftDelay: 60 * time.Millisecond})
	r := &propRun{tb: t, seed: seed, size: size, c: c, cl: cl, replicas: replicas}
	r.ledger.unknown = map[string]int{}
	r.ledger.byVia = map[string]int{}
	for n := 0; n < size.shards; n++ {
		r.track = append(r.track, &propTrack{lastGCP: -1, lastStats: -1, cp: -1, delivered: map[string]propHit{}})
	}
	if err := cl.json("PUT", "/"+propIndex, map[string]any{"settings": map[string]any{
		"number_of_shards": size.shards, "number_of_replicas": replicas, "refresh_interval": "50ms",
	}}, nil); err != nil {
		t.Fatal(err)
	}
	master := rand.New(rand.NewSource(seed))
	for round := 1; round <= size.rounds && !r.failed(); round++ {
		r.stopWrites.Store(false)
		stop := make(chan struct{})
		var writers, others sync.WaitGroup
		for w := 0; w < size.writers; w++ {
			writers.Add(1)
			go func(w int, rng *rand.Rand) {
				defer writers.Done()
				r.writer(w, rng)
			}(w, rand.New(rand.NewSource(master.Int63())))
		}
		others.Add(2)
		go func(rng *rand.Rand) {
			defer others.Done()
			r.chaos(stop, rng)
		}(rand.New(rand.NewSource(master.Int63())))
		go func(rng *rand.Rand) {
			defer others.Done()
			r.checker(stop, rng)
		}(rand.New(rand.NewSource(master.Int63())))
		time.Sleep(size.roundDur)
		r.stopWrites.Store(true)
		writers.Wait()
		close(stop)
		others.Wait()
		r.quiesce(round, rand.New(rand.NewSource(master.Int63())))
	}
	l := &r.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("seed %d: %d rounds in %s: %d requests, %d bulk items, write attempts by API %v: %d ops acknowledged, %d failed, %d no-ops; "+
		"%d kills, %d restarts; %d state checks, %d search pages, %d samples inconclusive (failover in between)",
		seed, size.rounds, time.Since(start).Round(time.Millisecond), l.requests, l.items, l.byVia, len(l.acked), l.failures, l.noops,
		r.kills.Load(), r.restarts.Load(), r.checks.Load(), r.relayPages.Load(), r.inconclusive.Load())
	if r.kills.Load() == 0 || len(l.acked) == 0 {
		t.Errorf("seed %d: the run did nothing useful: %d kills, %d acknowledged ops", seed, r.kills.Load(), len(l.acked))
	}
}

// TestProperty_HoldMakesLaterSeqSearchableFirst shows, deterministically,
// what the cursor guards against: seq N+1 is searchable while seq N is still
// in flight, and the gcp stays below N until N completes.
func TestProperty_HoldMakesLaterSeqSearchableFirst(t *testing.T) {
	c, cl := propStartCluster(t, esemu.Config{Nodes: 2, Seed: 1})
	const idx = "hold"
	if err := cl.json("PUT", "/"+idx, map[string]any{"settings": map[string]any{
		"number_of_shards": 1, "number_of_replicas": 1, "refresh_interval": "-1",
	}}, nil); err != nil {
		t.Fatal(err)
	}
	put := func(id string) propWriteResp {
		t.Helper()
		var wr propWriteResp
		if err := cl.json("PUT", "/"+idx+"/_doc/"+id, map[string]any{"id": id}, &wr); err != nil {
			t.Fatal(err)
		}
		if wr.SeqNo == nil {
			t.Fatalf("PUT %s: no _seq_no in %+v", id, wr)
		}
		return wr
	}
	type seqID struct {
		Seq int64
		ID  string
	}
	visible := func(cp, gcp int64) []seqID {
		t.Helper()
		if err := cl.json("POST", "/"+idx+"/_refresh", nil, nil); err != nil {
			t.Fatal(err)
		}
		var out []seqID
		for k := 0; k < 4; k++ { // either copy may answer; both must agree
			hits, _, err := cl.pages(idx, 0, cp, gcp, 2)
			if err != nil {
				t.Fatal(err)
			}
			var got []seqID
			for _, h := range hits {
				got = append(got, seqID{h.SeqNo, h.ID})
			}
			if k > 0 && fmt.Sprint(got) != fmt.Sprint(out) {
				t.Fatalf("range (%d, %d]: one search returned %v, another %v", cp, gcp, out, got)
			}
			out = got
		}
		return out
	}
	state := func() esemu.ShardState {
		t.Helper()
		st, err := c.ShardState(idx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	first := put("first")
	h, err := c.Hold(idx, 0)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan propWriteResp, 1)
	go func() {
		var wr propWriteResp
		_ = cl.json("PUT", "/"+idx+"/_doc/held", map[string]any{"id": "held"}, &wr)
		held <- wr
	}()
	select {
	case <-h.Arrived():
	case <-time.After(5 * time.Second):
		t.Fatal("the held write never reached the shard")
	}
	if got := h.Seqs(); len(got) != 1 || got[0] != *first.SeqNo+1 {
		t.Fatalf("held batch seqs = %v, want [%d]", got, *first.SeqNo+1)
	}
	n := h.Seqs()[0]
	later := put("later")
	if got, want := *later.SeqNo, n+1; got != want {
		t.Fatalf("later write got seq %d, want %d", got, want)
	}

	if got, want := visible(-1, 1<<40), []seqID{{*first.SeqNo, "first"}, {n + 1, "later"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("while seq %d is held, visible = %v, want %v (seq N+1 searchable before N)", n, got, want)
	}
	for i := 0; i < 5; i++ {
		c.SyncGlobalCheckpoints()
		st := state()
		if st.GlobalCheckpoint != n-1 {
			t.Fatalf("while seq %d is held, gcp = %d, want %d", n, st.GlobalCheckpoint, n-1)
		}
		for j, cp := range st.Copies {
			if cp.LocalCheckpoint != n-1 || cp.MaxSeqNo != n+1 || cp.GlobalCheckpoint != n-1 {
				t.Fatalf("while seq %d is held, copy %d = %+v, want local and global checkpoint %d, max seq no %d", n, j, cp, n-1, n+1)
			}
		}
		gcps, err := cl.statsGCP(idx)
		if err != nil {
			t.Fatal(err)
		}
		if gcps[0] != n-1 {
			t.Fatalf("while seq %d is held, _stats gcp = %d, want %d", n, gcps[0], n-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// a cursor that reads only up to the gcp does not skip seq N
	if got, want := visible(-1, n-1), []seqID{{*first.SeqNo, "first"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("range (-1, gcp %d] = %v, want %v", n-1, got, want)
	}
	select {
	case wr := <-held:
		t.Fatalf("the held write returned before its release: %+v", wr)
	default:
	}

	h.Release()
	var wr propWriteResp
	select {
	case wr = <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the held write did not finish after its release")
	}
	if wr.SeqNo == nil || *wr.SeqNo != n || wr.Result != "created" {
		t.Fatalf("held write answered %+v, want created at seq %d", wr, n)
	}
	if st := state(); st.GlobalCheckpoint != n+1 {
		t.Fatalf("after release, gcp = %d, want %d", st.GlobalCheckpoint, n+1)
	}
	if got, want := visible(n-1, n+1), []seqID{{n, "held"}, {n + 1, "later"}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after release, range (%d, %d] = %v, want %v", n-1, n+1, got, want)
	}
}

// TestProperty_RedShardKeepsCheckpointedOps kills every copy of a shard on
// purpose: while red, writes fail and searches report the shard failed; a
// stale replica coming back first is not promoted; when the primary's node
// returns, every acknowledged op and every op <= gcp is still there.
func TestProperty_RedShardKeepsCheckpointedOps(t *testing.T) {
	c, cl := propStartCluster(t, esemu.Config{Nodes: 2, Seed: 7, NodeLeftDelay: -1})
	const idx = "red"
	if err := cl.json("PUT", "/"+idx, map[string]any{"settings": map[string]any{
		"number_of_shards": 1, "number_of_replicas": 1, "refresh_interval": "-1",
	}}, nil); err != nil {
		t.Fatal(err)
	}
	acked := map[int64]string{}
	put := func(id string) {
		t.Helper()
		var wr propWriteResp
		if err := cl.json("PUT", "/"+idx+"/_doc/"+id, map[string]any{"id": id}, &wr); err != nil {
			t.Fatal(err)
		}
		acked[*wr.SeqNo] = id
	}
	for i := 0; i < 20; i++ {
		put("a" + strconv.Itoa(i))
	}
	st, _ := c.ShardState(idx, 0)
	pi := propPrimaryIndex(st)
	primaryNode, replicaNode := st.Copies[pi].Node, st.Copies[1-pi].Node
	if err := c.KillNode(replicaNode); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		put("b" + strconv.Itoa(i))
	}
	st, _ = c.ShardState(idx, 0)
	if got, want := st.GlobalCheckpoint, int64(29); got != want {
		t.Fatalf("with the replica down (out of the in-sync set), gcp = %d, want %d", got, want)
	}
	before, _ := c.History(idx, 0, pi)
	gcpBefore, termBefore := st.GlobalCheckpoint, st.PrimaryTerm
	if err := c.KillNode(primaryNode); err != nil {
		t.Fatal(err)
	}
	st, _ = c.ShardState(idx, 0)
	if propPrimaryIndex(st) >= 0 {
		t.Fatalf("with both nodes down, the shard has a started primary: %+v", st)
	}
	if status, b, err := cl.do("PUT", "/"+idx+"/_doc/c0", "application/json", []byte(`{"id":"c0"}`)); err != nil || status != http.StatusServiceUnavailable {
		t.Fatalf("write to a red shard: HTTP %d %v %s, want 503", status, err, propTrim(b))
	}
	if _, err := cl.search(idx, 0, map[string]any{"query": map[string]any{"match_all": map[string]any{}}}); err == nil {
		t.Fatal("search of a red shard succeeded, want an error or a failed shard")
	}
	if err := c.RestartNode(replicaNode); err != nil {
		t.Fatal(err)
	}
	st, _ = c.ShardState(idx, 0)
	if propPrimaryIndex(st) >= 0 {
		t.Fatalf("the stale replica (missing acknowledged seqs 20..29) was promoted: %+v", st)
	}
	if err := c.RestartNode(primaryNode); err != nil {
		t.Fatal(err)
	}
	st, _ = c.ShardState(idx, 0)
	pi = propPrimaryIndex(st)
	if pi < 0 || st.Copies[pi].Node != primaryNode {
		t.Fatalf("after the primary's node returned: %+v, want its copy primary again", st)
	}
	if st.PrimaryTerm <= termBefore || st.GlobalCheckpoint < gcpBefore {
		t.Fatalf("after recovery term %d gcp %d, want term > %d and gcp >= %d", st.PrimaryTerm, st.GlobalCheckpoint, termBefore, gcpBefore)
	}
	for i := range st.Copies {
		hist, _ := c.History(idx, 0, i)
		if len(hist) < len(before) {
			t.Fatalf("copy %d has %d ops, %d before the outage", i, len(hist), len(before))
		}
		for j, o := range before {
			if !propSameOp(hist[j], o) {
				t.Fatalf("copy %d: %s became %s", i, propOpString(o), propOpString(hist[j]))
			}
		}
		for seq, id := range acked {
			if o, ok := propOpAt(hist, seq); !ok || o.ID != id {
				t.Fatalf("copy %d lost acknowledged %q at seq %d", i, id, seq)
			}
		}
	}
	put("c1")
	if err := cl.json("POST", "/"+idx+"/_refresh", nil, nil); err != nil {
		t.Fatal(err)
	}
	hits, _, err := cl.pages(idx, 0, -1, 1<<40, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 31 {
		t.Fatalf("after recovery %d docs visible, want 31", len(hits))
	}
}
