package esemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

type opKind uint8

const (
	opIndex opKind = iota
	opDelete
	opNoop
)

// op is one operation in a shard's history. It is immutable once created and
// shared by every copy that processed it.
type op struct {
	seq     int64
	term    int64
	version int64
	kind    opKind
	id      string
	routing string
	source  json.RawMessage
	at      time.Time // when the primary started it (tombstone age for gc_deletes)
}

// shardCopy is one copy (primary or replica) of a shard on a node: the ops it
// processed, its local checkpoint, the global checkpoint it knows, its engine
// state and the view its last refresh made searchable.
type shardCopy struct {
	node    int  // node holding the copy's data; -1 when never allocated
	primary bool // primary or replica
	started bool // assigned, recovered and serving
	inSync  bool // in the in-sync set the primary computes the gcp over

	ops      []*op // by seq; nil when this copy has not processed that seq
	lcp      int64
	maxSeq   int64
	knownGCP int64

	engine map[string]*op // id -> latest applied index or delete op
	dirty  []string       // ids applied since the last refresh

	visible     map[string]*op // id -> searchable live document
	bySeq       []*op          // seq -> searchable live document at that seq
	deletedDocs int64          // documents superseded or deleted in the view
	refreshes   int64

	failSearches int // injected: the next N searches on this copy fail
	lastSearch   time.Time

	// counters for _stats
	nOps, nIndex, nDelete, storeBytes int64
	counters                          struct{ queries, scrolls, gets atomic.Int64 }
}

func newCopy(node int, primary bool) *shardCopy {
	return &shardCopy{
		node: node, primary: primary, started: node >= 0, inSync: node >= 0,
		lcp: -1, maxSeq: -1, knownGCP: -1,
		engine: map[string]*op{}, visible: map[string]*op{},
	}
}

// apply processes ops on this copy. A copy keeps, per id, the op with the
// highest seq it has seen, whatever order ops arrive in (ES resolves
// out-of-order replica ops the same way).
func (c *shardCopy) apply(ops []*op) {
	for _, o := range ops {
		for int64(len(c.ops)) <= o.seq {
			c.ops = append(c.ops, nil)
		}
		if c.ops[o.seq] != nil {
			continue
		}
		c.ops[o.seq] = o
		c.nOps++
		switch o.kind {
		case opIndex:
			c.nIndex++
			c.storeBytes += int64(len(o.source)) + 64
		case opDelete:
			c.nDelete++
		}
		if o.seq > c.maxSeq {
			c.maxSeq = o.seq
		}
		if o.kind == opNoop {
			continue
		}
		if cur := c.engine[o.id]; cur == nil || o.seq > cur.seq {
			c.engine[o.id] = o
			c.dirty = append(c.dirty, o.id)
		}
	}
	for c.lcp+1 < int64(len(c.ops)) && c.ops[c.lcp+1] != nil {
		c.lcp++
	}
}

// refresh makes everything applied so far searchable on this copy.
func (c *shardCopy) refresh() {
	for _, id := range c.dirty {
		newest := c.engine[id]
		old := c.visible[id]
		if old == newest {
			continue
		}
		if old != nil {
			c.bySeq[old.seq] = nil
			delete(c.visible, id)
			c.deletedDocs++
		}
		if newest != nil && newest.kind == opIndex {
			c.visible[id] = newest
			for int64(len(c.bySeq)) <= newest.seq {
				c.bySeq = append(c.bySeq, nil)
			}
			c.bySeq[newest.seq] = newest
		}
	}
	c.dirty = c.dirty[:0]
	c.refreshes++
}

// resetTo rebuilds the copy from its own ops up to seq upTo, dropping every op
// above it, as a replica's engine is reset to the global checkpoint after a
// failover. The view is rebuilt too.
func (c *shardCopy) resetTo(upTo int64) {
	keep := c.ops
	if int64(len(keep)) > upTo+1 {
		keep = keep[:upTo+1]
	}
	c.rebuild(keep)
}

// rebuild replaces the copy's state by the given history and refreshes it.
func (c *shardCopy) rebuild(history []*op) {
	c.ops = nil
	c.nOps, c.nIndex, c.nDelete, c.storeBytes = 0, 0, 0, 0
	c.lcp, c.maxSeq = -1, -1
	c.engine = map[string]*op{}
	c.visible = map[string]*op{}
	c.bySeq = nil
	c.dirty = nil
	var present []*op
	for _, o := range history {
		if o != nil {
			present = append(present, o)
		}
	}
	c.apply(present)
	c.refresh()
}

// shard is one shard of an index with its copies. mu guards everything in it,
// including the copies.
type shard struct {
	mu    sync.RWMutex
	index *index
	num   int

	term     int64
	nextSeq  int64
	gcp      int64
	copies   []*shardCopy
	versions map[string]*op // the primary's version map: latest started op per id
	hold     *Hold
	replHold *Hold // parks the next batch between the primary and its replicas
	lost     int64 // ops discarded by failovers (for the control API)

	conflicts atomic.Int64 // 409 version conflicts answered
}

func newShard(idx *index, num int, nodes []int) *shard {
	s := &shard{index: idx, num: num, term: 1, gcp: -1, versions: map[string]*op{}}
	for i, n := range nodes {
		s.copies = append(s.copies, newCopy(n, i == 0))
	}
	return s
}

// primary returns the started primary copy, or nil when the shard has none.
func (s *shard) primary() *shardCopy {
	for _, c := range s.copies {
		if c.primary && c.started {
			return c
		}
	}
	return nil
}

func (s *shard) startedCopies() []*shardCopy {
	var out []*shardCopy
	for _, c := range s.copies {
		if c.started {
			out = append(out, c)
		}
	}
	return out
}

// updateGCP recomputes the primary's global checkpoint as the minimum local
// checkpoint over in-sync copies. It never decreases.
func (s *shard) updateGCP() {
	if s.primary() == nil {
		return
	}
	min := int64(-2)
	for _, c := range s.copies {
		if c.started && c.inSync {
			if min == -2 || c.lcp < min {
				min = c.lcp
			}
		}
	}
	if min > s.gcp {
		s.gcp = min
	}
	if p := s.primary(); p != nil && s.gcp > p.knownGCP {
		p.knownGCP = s.gcp
	}
}

// syncGlobalCheckpoint tells every started replica the primary's gcp, as ES's
// background global checkpoint sync does.
func (s *shard) syncGlobalCheckpoint() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.copies {
		if c.started && s.gcp > c.knownGCP && c.lcp >= s.gcp {
			c.knownGCP = s.gcp
		}
	}
}

func (s *shard) refreshAll() (total, ok int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.copies {
		total++
		if c.started {
			c.refresh()
			ok++
		}
	}
	return total, ok
}

// Hold is a one-shot barrier on a shard: the next write batch that starts on
// the shard takes its sequence numbers and then waits, unapplied on every
// copy, until Release. Used to make seq N+1 searchable before seq N.
type Hold struct {
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
	seqs    []int64
}

// Arrived is closed once a write batch is parked on the hold.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Seqs returns the sequence numbers of the parked batch (valid after Arrived).
func (h *Hold) Seqs() []int64 { return h.seqs }

// Release lets the parked batch (or the next one, if none arrived yet) finish.
func (h *Hold) Release() { h.once.Do(func() { close(h.release) }) }

// HoldReplication parks the next write batch on shard num of the index
// after the primary applied it and before any replica does, until the
// returned Hold is released: the primary then holds ops above the global
// checkpoint that a failover would discard. A failover while it is parked
// fails the batch, as ES fails a write whose primary went away.
func (c *Cluster) HoldReplication(indexName string, num int) (*Hold, error) {
	s, err := c.lookupShard(indexName, num)
	if err != nil {
		return nil, err
	}
	h := &Hold{arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.replHold = h
	s.mu.Unlock()
	return h, nil
}

// writeReq is one document write (index, create, delete or update) routed to
// a shard, and its result.
type writeReq struct {
	kind        opKind // opIndex or opDelete; updates resolve to opIndex
	id          string
	routing     string
	source      json.RawMessage
	create      bool // op_type=create
	version     int64
	versionType string // "", "internal", "external", "external_gte"
	hasVersion  bool
	ifSeqNo     int64
	ifTerm      int64
	hasCAS      bool
	update      *updateSpec

	// results
	err       *esError
	result    string
	status    int
	op        *op
	noop      *op // for update noops: the current document
	copies    int
	succeeded int
}

// updateSpec is a partial-document update (the _update API).
type updateSpec struct {
	doc         map[string]any
	upsert      map[string]any
	docAsUpsert bool
	detectNoop  bool
}

// resolve applies version semantics against the primary's version map and
// returns the op to run, or sets req.err (conflicts consume no seq no).
func (s *shard) resolve(req *writeReq, now time.Time, gcDeletes time.Duration) *op {
	idx := s.index
	cur := s.versions[req.id]
	live := cur != nil && cur.kind == opIndex
	tomb := cur != nil && cur.kind == opDelete && now.Sub(cur.at) < gcDeletes
	curVersion := int64(-1) // NOT_FOUND
	if live || tomb {
		curVersion = cur.version
	}
	conflict := func(reason string) *op {
		s.conflicts.Add(1)
		req.err = errVersionConflict(idx.name, idx.uuid, s.num, reason)
		return nil
	}
	if req.hasCAS {
		if !live {
			return conflict(fmt.Sprintf("[%s]: version conflict, required seqNo [%d], primary term [%d]. but no document was found",
				req.id, req.ifSeqNo, req.ifTerm))
		}
		if cur.seq != req.ifSeqNo || cur.term != req.ifTerm {
			return conflict(fmt.Sprintf("[%s]: version conflict, required seqNo [%d], primary term [%d]. current document has seqNo [%d] and primary term [%d]",
				req.id, req.ifSeqNo, req.ifTerm, cur.seq, cur.term))
		}
	}
	kind := req.kind
	var source json.RawMessage = req.source
	result := ""
	if req.update != nil {
		u := req.update
		switch {
		case live:
			var old map[string]any
			if err := decodeJSON(cur.source, &old); err != nil {
				old = map[string]any{}
			}
			merged := deepMerge(old, u.doc)
			b, _ := marshalJSON(merged)
			if u.detectNoop && jsonEqual(cur.source, b) {
				req.result, req.status, req.noop = "noop", http.StatusOK, cur
				return nil
			}
			source = b
		case u.docAsUpsert:
			b, _ := marshalJSON(u.doc)
			source = b
		case u.upsert != nil:
			b, _ := marshalJSON(u.upsert)
			source = b
		default:
			req.err = errDocumentMissing(idx.name, idx.uuid, s.num, req.id)
			return nil
		}
		kind = opIndex
	}
	version := int64(1)
	switch req.versionType {
	case "external", "external_gte":
		gte := req.versionType == "external_gte"
		if curVersion != -1 {
			if !gte && curVersion >= req.version {
				return conflict(fmt.Sprintf("[%s]: version conflict, current version [%d] is higher or equal to the one provided [%d]",
					req.id, curVersion, req.version))
			}
			if gte && curVersion > req.version {
				return conflict(fmt.Sprintf("[%s]: version conflict, current version [%d] is higher than the one provided [%d]",
					req.id, curVersion, req.version))
			}
		}
		version = req.version
	default:
		if curVersion != -1 {
			version = curVersion + 1
		}
	}
	if req.create && kind == opIndex && live {
		return conflict(fmt.Sprintf("[%s]: version conflict, document already exists (current version [%d])", req.id, cur.version))
	}
	switch {
	case kind == opDelete && !live:
		result = "not_found"
	case kind == opDelete:
		result = "deleted"
	case live:
		result = "updated"
	default:
		result = "created"
	}
	req.result = result
	req.status = http.StatusOK
	if result == "created" {
		req.status = http.StatusCreated
	}
	if result == "not_found" {
		req.status = http.StatusNotFound
	}
	o := &op{seq: s.nextSeq, term: s.term, version: version, kind: kind, id: req.id, routing: req.routing, at: now}
	if kind == opIndex {
		o.source = source
	}
	s.nextSeq++
	s.versions[req.id] = o
	return o
}

// write runs a batch of writes on the shard the way ES runs a bulk shard
// request: each op takes its seq no on the primary in order, then the batch is
// applied on the primary and replicated to the replicas. Completion may be
// delayed at random (out-of-order mode) so that a later batch can become
// visible first. It returns when every started copy has applied the batch, or
// when a failover made it moot (the ops then fail and may be lost).
func (s *shard) write(c *Cluster, reqs []*writeReq) {
	now := time.Now()
	s.mu.Lock()
	p := s.primary()
	if p == nil {
		s.mu.Unlock()
		for _, r := range reqs {
			r.err = errUnavailableShards(s.index.name, s.num, "primary shard is not active")
		}
		return
	}
	gcDeletes := s.index.settings.gcDeletes
	var ops []*op
	for _, r := range reqs {
		if o := s.resolve(r, now, gcDeletes); o != nil {
			r.op = o
			ops = append(ops, o)
		}
	}
	term := s.term
	h := s.hold
	s.hold = nil
	s.mu.Unlock()
	if len(ops) == 0 {
		s.finishNoops(reqs)
		return
	}
	if h != nil {
		for _, o := range ops {
			h.seqs = append(h.seqs, o.seq)
		}
		close(h.arrived)
		<-h.release
	}
	c.completionDelay()

	s.mu.Lock()
	p = s.primary()
	if p == nil || s.term != term {
		s.mu.Unlock()
		s.failLost(reqs)
		return
	}
	p.apply(ops)
	s.updateGCP()
	gcpSent := s.gcp
	var replicas []*shardCopy
	for _, cp := range s.copies {
		if cp.started && !cp.primary {
			replicas = append(replicas, cp)
		}
	}
	total := len(s.copies)
	rh := s.replHold
	s.replHold = nil
	s.mu.Unlock()
	if rh != nil {
		// Applied on the primary, not yet on any replica: a slow replica.
		for _, o := range ops {
			rh.seqs = append(rh.seqs, o.seq)
		}
		close(rh.arrived)
		<-rh.release
	}

	// Each replica applies the batch after its own delay, as ES replicates to
	// every replica in parallel: one replica may hold ops another lacks, which
	// a failover then resolves by resetting it to the gcp.
	var lost atomic.Bool
	var succeeded atomic.Int64
	succeeded.Add(1) // the primary
	replicate := func(cp *shardCopy) {
		c.completionDelay()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.term != term || s.primary() == nil {
			lost.Store(true)
			return
		}
		if !cp.started || cp.primary {
			return // failed since; a recovery copies the primary's ops
		}
		cp.apply(ops)
		if gcpSent > cp.knownGCP && cp.lcp >= gcpSent {
			cp.knownGCP = gcpSent
		}
		succeeded.Add(1)
		s.updateGCP()
	}
	switch len(replicas) {
	case 0:
		c.completionDelay()
		s.mu.RLock()
		lost.Store(s.term != term || s.primary() == nil)
		s.mu.RUnlock()
	case 1:
		replicate(replicas[0])
	default:
		var wg sync.WaitGroup
		for _, cp := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replicate(cp)
			}()
		}
		wg.Wait()
	}
	if lost.Load() {
		s.failLost(reqs)
		return
	}
	for _, r := range reqs {
		r.copies, r.succeeded = total, int(succeeded.Load())
	}
}

func (s *shard) finishNoops(reqs []*writeReq) {
	s.mu.RLock()
	total := len(s.copies)
	s.mu.RUnlock()
	for _, r := range reqs {
		r.copies = total
	}
}

// failLost fails the ops of a batch whose primary went away before the batch
// completed: ES fails or retries such a request, and the op survives only if
// a promoted copy had processed it.
func (s *shard) failLost(reqs []*writeReq) {
	for _, r := range reqs {
		if r.op != nil {
			r.err = errUnavailableShards(s.index.name, s.num, "primary failed while the operation was in flight")
			r.op = nil
		}
	}
}

// copyOnNode returns the copy whose data lives on node n.
func (s *shard) copyOnNode(n int) *shardCopy {
	for _, c := range s.copies {
		if c.node == n {
			return c
		}
	}
	return nil
}

// nodeDown fails every copy on node n. If the primary was there, an in-sync
// replica is promoted: the primary term rises, the new primary fills gaps in
// its history with no-ops, and every other copy is reset to the global
// checkpoint and resynced from it. Ops the promoted copy had not processed
// are gone from the shard's history, as after a real failover.
func (s *shard) nodeDown(n int, pick func(int) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.copyOnNode(n)
	if c == nil || !c.started {
		return
	}
	wasPrimary := c.primary
	c.started, c.inSync = false, false
	if !wasPrimary {
		s.updateGCP()
		return
	}
	var candidates []*shardCopy
	for _, r := range s.copies {
		if r.started && r.inSync {
			candidates = append(candidates, r)
		}
	}
	if len(candidates) == 0 {
		return // red: the primary stays on the dead node until it returns
	}
	np := candidates[pick(len(candidates))]
	c.primary = false
	np.primary = true
	s.promote(np)
}

// promote makes c the primary: term + 1, gap fill, resync of the others.
func (s *shard) promote(np *shardCopy) {
	s.term++
	before := s.nextSeq
	var fill []*op
	for seq := np.lcp + 1; seq <= np.maxSeq; seq++ {
		if seq >= int64(len(np.ops)) || np.ops[seq] == nil {
			fill = append(fill, &op{seq: seq, term: s.term, kind: opNoop, at: time.Now()})
		}
	}
	np.apply(fill)
	np.refresh()
	s.nextSeq = np.maxSeq + 1
	// Discarded: the seq nos the old primary handed out that the new one
	// lacks, whether now filled with no-ops or above its max seq no.
	s.lost += int64(len(fill))
	if s.nextSeq < before {
		s.lost += before - s.nextSeq
	}
	// The version map is rebuilt from the new primary's history.
	s.versions = make(map[string]*op, len(np.engine))
	for id, o := range np.engine {
		s.versions[id] = o
	}
	if np.knownGCP > s.gcp {
		s.gcp = np.knownGCP
	}
	for _, r := range s.copies {
		if r == np || !r.started {
			continue
		}
		r.resetTo(s.gcp)
		var above []*op
		for seq := s.gcp + 1; seq < int64(len(np.ops)); seq++ {
			if o := np.ops[seq]; o != nil {
				above = append(above, o)
			}
		}
		r.apply(above)
		r.refresh()
	}
	s.updateGCP()
}

// reconcile starts every copy that can start: a copy whose node is alive
// again recovers from the primary, or becomes the primary when it was the
// primary and the shard has none; a copy whose node is gone for good (or was
// never allocated) moves to a live node holding no copy of this shard, where
// it recovers from the primary. A stale replica is never promoted.
func (s *shard) reconcile(alive func(node int) bool, movable func(node int) bool, free func(taken map[int]bool) int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.copies {
		if c.started || c.node < 0 || !alive(c.node) || !c.primary || s.primary() != nil {
			continue
		}
		c.started, c.inSync = true, true
		s.promote(c)
	}
	if s.primary() == nil {
		return
	}
	for _, c := range s.copies {
		if c.started {
			continue
		}
		if c.node < 0 || (!alive(c.node) && movable(c.node)) {
			taken := map[int]bool{}
			for _, o := range s.copies {
				if o != c && o.node >= 0 {
					taken[o.node] = true
				}
			}
			n := free(taken)
			if n < 0 {
				continue
			}
			c.node = n
		}
		if alive(c.node) {
			s.recover(c)
		}
	}
}

// recover makes c a started, in-sync replica with the primary's history.
func (s *shard) recover(c *shardCopy) {
	p := s.primary()
	c.primary = false
	c.rebuild(p.ops)
	c.knownGCP = s.gcp
	c.started, c.inSync = true, true
	s.updateGCP()
}
