package deletes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay/es"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultInterval          = 2 * time.Minute
	DefaultMaxDeleteFraction = 0.5
	DefaultPageSize          = 5000
	DefaultDurableWait       = 30 * time.Second
	// scratchTTL bounds the life of a scan's scratch set if the relay dies
	// mid-scan.
	scratchTTL = time.Hour
)

// ErrAborted wraps every reason a scan stopped without emitting anything.
var ErrAborted = errors.New("delete scan aborted")

// addScratch adds ids (ARGV[2..]) to a scan's scratch set (KEYS[1]) with a
// TTL (ARGV[1], seconds), only while the feed's meta hash (KEYS[2]) exists:
// a Redis that lost the feed's state (restarted empty) gets no key from a
// scan still running, whatever the relay has not noticed yet. (TYPE, not
// EXISTS: the relay's documented ACL has it.)
var addScratch = redis.NewScript(`
if redis.call('TYPE', KEYS[2]).ok == 'none' then
  return redis.error_reply('ESCFNOSTATE the feed state is gone: ' .. KEYS[2] .. ' does not exist')
end
for i = 2, #ARGV, 1000 do
  redis.call('SADD', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
`)

// Config configures a Scanner.
type Config struct {
	// ES reads the cluster. Required.
	ES *es.Client
	// Client is the feed's Redis. Required.
	Client redis.UniversalClient
	// Keys names the feed's keys. Required.
	Keys redisx.Keys
	// Store commits the deletes. Required (with its Lease).
	Store *checkpoint.Store
	// Interval is the least time between two scans of a shard. Default 2m.
	Interval time.Duration
	// MaxDeleteFraction: a scan that would delete more than this fraction
	// of a shard's delivered ids is confirmed by a second, independent scan
	// before anything is emitted. Default 0.5.
	MaxDeleteFraction float64
	// Listing is es.ListingPIT, es.ListingScroll or es.ListingAuto (default:
	// PIT where the cluster has it).
	Listing string
	// PageSize is the listing page size. Default 5000.
	PageSize int
	// DurableWait bounds the wait for the global checkpoint to cover what a
	// re-check saw. Default 30s.
	DurableWait time.Duration
	// Logger receives scan logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics registers escf_delete_scans_total and escf_deletes_found_total.
	// Default nil: not registered.
	Metrics prometheus.Registerer
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.ES == nil:
		return errors.New("deletes config: ES is nil")
	case c.Client == nil:
		return errors.New("deletes config: Client is nil")
	case c.Keys.Feed() == "":
		return errors.New("deletes config: Keys is empty")
	case c.Store == nil:
		return errors.New("deletes config: Store is nil")
	case c.Interval < 0:
		return fmt.Errorf("deletes config: Interval = %s: want >= 0", c.Interval)
	case c.MaxDeleteFraction < 0 || c.MaxDeleteFraction > 1:
		return fmt.Errorf("deletes config: MaxDeleteFraction = %g: want 0..1", c.MaxDeleteFraction)
	case c.Listing != es.ListingAuto && c.Listing != es.ListingPIT && c.Listing != es.ListingScroll:
		return fmt.Errorf("deletes config: Listing = %q: want pit or scroll", c.Listing)
	case c.PageSize < 0 || c.PageSize > 10000:
		return fmt.Errorf("deletes config: PageSize = %d: want 1..10000", c.PageSize)
	}
	return nil
}

// Stats count what scans did; they only grow.
type Stats struct {
	// Due is how many times a shard was due for a scan.
	Due int64
	// SavedByGap: skipped because no seq no went undelivered since the
	// shard's last scan.
	SavedByGap int64
	// SavedByCount: skipped because the shard's document count up to its
	// checkpoint equals its delivered ids.
	SavedByCount int64
	// Listings: live-id listings run (a confirmed scan lists twice).
	Listings int64
	// Confirmations: scans over MaxDeleteFraction that listed a second time.
	Confirmations int64
	// Aborted: scans stopped by a partial view, an error or a failover.
	Aborted int64
	// Deletes: delete events committed.
	Deletes int64
}

// Scanner finds delivered documents that are gone. Its Scan is called by
// the relay between the shard reads of an index, which is what orders a
// delete before any re-creation. It is safe for concurrent use on
// different shards.
type Scanner struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	last       map[checkpoint.ShardID]time.Time
	lastReport time.Time

	due, savedGap, savedCount, listings, confirmations, aborted, deleted atomic.Int64
}

// New returns a Scanner.
func New(cfg Config) (*Scanner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxDeleteFraction == 0 {
		cfg.MaxDeleteFraction = DefaultMaxDeleteFraction
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.DurableWait == 0 {
		cfg.DurableWait = DefaultDurableWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Scanner{cfg: cfg, log: cfg.Logger, last: map[checkpoint.ShardID]time.Time{}}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(newScanCollector(s)); err != nil {
			return nil, fmt.Errorf("delete scan metrics: %w", err)
		}
	}
	return s, nil
}

// Stats returns the counters.
func (s *Scanner) Stats() Stats {
	return Stats{Due: s.due.Load(), SavedByGap: s.savedGap.Load(), SavedByCount: s.savedCount.Load(),
		Listings: s.listings.Load(), Confirmations: s.confirmations.Load(), Aborted: s.aborted.Load(),
		Deletes: s.deleted.Load()}
}

// Shard is one shard to scan, as the relay knows it after reading it up to
// its checkpoint.
type Shard struct {
	Index  string
	Target string
	UUID   string
	Shard  int
	// Checkpoint is the shard's committed checkpoint: every op up to it was
	// read. Deletes are stamped with it.
	Checkpoint int64
	// Gap is the shard's committed gap counter.
	Gap int64
	// Origin is where the feed began reading the shard (-1: from its
	// beginning; the global checkpoint of the time with --from now).
	// Documents at or below it were never delivered unless written again.
	Origin int64
}

func (sh Shard) id() checkpoint.ShardID {
	return checkpoint.ShardID{IndexUUID: sh.UUID, Shard: sh.Shard}
}

// Result is what a Scan did.
type Result struct {
	// Scanned: the shard was due.
	Scanned bool
	// Deleted is the number of delete events committed.
	Deleted int
	// GapCleared is the amount subtracted from the shard's gap counter.
	GapCleared int64
}

// Scan scans one shard if it is due (Interval since its last scan): first
// the gap proof, then the count proof, then a listing of its live ids. It
// commits the deletes it confirms, with their SREM and the gap reset, in
// one transaction. An error wraps ErrAborted (nothing was emitted; the
// shard is scanned again at the next round) or is a commit error.
func (s *Scanner) Scan(ctx context.Context, sh Shard) (Result, error) {
	id := sh.id()
	s.mu.Lock()
	last, seen := s.last[id]
	if !seen {
		// The first scan of a shard waits a whole interval too: at startup
		// every shard would otherwise be scanned at once.
		s.last[id] = time.Now()
		s.mu.Unlock()
		return Result{}, nil
	}
	if time.Since(last) < s.cfg.Interval {
		s.mu.Unlock()
		return Result{}, nil
	}
	s.mu.Unlock()
	s.due.Add(1)
	defer s.report()
	res, err := s.scan(ctx, sh)
	res.Scanned = true
	if err != nil {
		if errors.Is(err, ErrAborted) {
			s.aborted.Add(1)
		}
		return res, err
	}
	s.mu.Lock()
	s.last[id] = time.Now()
	s.mu.Unlock()
	return res, nil
}

// reportEvery is how often the scan counters are logged at Info.
const reportEvery = 10 * time.Minute

// report logs the counters at most every reportEvery.
func (s *Scanner) report() {
	s.mu.Lock()
	if time.Since(s.lastReport) < reportEvery {
		s.mu.Unlock()
		return
	}
	s.lastReport = time.Now()
	s.mu.Unlock()
	st := s.Stats()
	s.log.Info("delete scans so far", "due", st.Due, "saved_by_gap_proof", st.SavedByGap, "saved_by_count_proof", st.SavedByCount,
		"listings", st.Listings, "confirmations", st.Confirmations, "aborted", st.Aborted, "deletes", st.Deletes)
}

func (s *Scanner) scan(ctx context.Context, sh Shard) (Result, error) {
	// One node coordinates the whole scan (es.Client.Pin): its stats,
	// refreshes, counts, listing and re-check are one view of the cluster.
	ec := s.cfg.ES.Pin()
	log := s.log.With("index", sh.Index, "shard", sh.Shard)
	id := sh.id()
	k := s.cfg.Keys
	// Gap proof: no seq no up to the checkpoint went undelivered since the
	// last scan, so no delivered document can have been deleted.
	if sh.Gap <= 0 {
		s.savedGap.Add(1)
		log.Debug("delete scan skipped: gap proof (no undelivered seq no since the last scan)")
		return Result{}, nil
	}
	aborted := func(format string, args ...any) error {
		err := fmt.Errorf("%w: shard %d of %s: %s", ErrAborted, sh.Shard, sh.Index, fmt.Sprintf(format, args...))
		log.Warn("delete scan aborted; it runs again next round", "reason", fmt.Sprintf(format, args...))
		return err
	}
	clearGap := func(n int64) (Result, error) {
		err := s.cfg.Store.Commit(ctx, checkpoint.Batch{Gaps: map[checkpoint.ShardID]int64{id: -n}, DropKeys: []string{k.Scan(sh.UUID, sh.Shard)}})
		return Result{GapCleared: n}, err
	}
	delivered, err := s.cfg.Client.SCard(ctx, k.Delivered(sh.UUID, sh.Shard)).Result()
	if err != nil {
		return Result{}, aborted("read delivered set size: %v", err)
	}
	if delivered == 0 {
		s.savedCount.Add(1)
		return clearGap(sh.Gap)
	}
	before, err := ec.Stats(ctx, []string{sh.Index})
	if err != nil {
		return Result{}, aborted("%v", err)
	}
	sc0, ok := before[sh.Index].Shard(sh.Shard)
	if !ok {
		return Result{}, aborted("the shard's primary is not started")
	}
	if sc0.GlobalCheckpoint < sh.Checkpoint {
		// The feed read up to its checkpoint from a primary whose gcp was
		// at least that; a view below it is older than what was delivered
		// (a node that was cut off and has not yet learned it was
		// removed answers from its own stale copy), and a listing from it
		// would take documents deleted since for live ones.
		return Result{}, aborted("the cluster's view of the shard (global checkpoint %d) is older than the feed's checkpoint %d", sc0.GlobalCheckpoint, sh.Checkpoint)
	}
	if err := ec.Refresh(ctx, sh.Index); err != nil {
		return Result{}, aborted("%v", err)
	}
	// Count proof: every live document with origin < seq no <= checkpoint
	// was delivered, and every delivered id still live with an unchanged
	// document is one of them; so if as many exist as were delivered, none
	// is gone. (A delivered document written again above the checkpoint
	// makes the count smaller: no proof, a listing.)
	count, err := ec.Count(ctx, sh.Index, sh.Shard, sc0.Node, sh.Origin, sh.Checkpoint)
	if err != nil {
		return Result{}, aborted("%v", err)
	}
	if count == delivered {
		s.savedCount.Add(1)
		log.Debug("delete scan skipped: count proof", "delivered", delivered, "count", count)
		return clearGap(sh.Gap)
	}
	gone, keepGap, err := s.findGone(ctx, ec, sh, sc0, log)
	if err != nil {
		return Result{}, err
	}
	if len(gone) > 0 && float64(len(gone)) > s.cfg.MaxDeleteFraction*float64(delivered) {
		// A mass delete is confirmed by a second, independent listing
		// before anything is emitted; only ids both found gone go.
		s.confirmations.Add(1)
		log.Warn("delete scan would delete a large share of the shard: confirming with a second scan",
			"gone", len(gone), "delivered", delivered, "max_fraction", s.cfg.MaxDeleteFraction)
		again, keep2, err := s.findGone(ctx, ec, sh, sc0, log)
		if err != nil {
			return Result{}, err
		}
		gone = intersect(gone, again)
		keepGap = keepGap || keep2
	}
	return s.commit(ctx, sh, gone, keepGap, log)
}

// findGone lists the shard's live ids into the scratch set, diffs the
// delivered set against it, re-checks the candidates with an ids query
// after a refresh, and waits until the global checkpoint covers what the
// re-check saw (so no failover can bring a document back). keepGap reports
// a candidate found re-created above the checkpoint: its delete must stay
// countable for a later scan in case the re-creation is rolled back.
func (s *Scanner) findGone(ctx context.Context, ec *es.Client, sh Shard, sc0 es.ShardCheckpoints, log *slog.Logger) (gone []string, keepGap bool, err error) {
	k := s.cfg.Keys
	scratch := k.Scan(sh.UUID, sh.Shard)
	rdb := s.cfg.Client
	aborted := func(format string, args ...any) error {
		// The reason wraps what format's %w name (es.ErrPrimaryChanged).
		reason := fmt.Errorf(format, args...)
		log.Warn("delete scan aborted; it runs again next round", "reason", reason.Error())
		return fmt.Errorf("%w: shard %d of %s: %w", ErrAborted, sh.Shard, sh.Index, reason)
	}
	if err := rdb.Del(ctx, scratch).Err(); err != nil {
		return nil, false, aborted("clear scratch set: %v", err)
	}
	s.listings.Add(1)
	start := time.Now()
	countBefore, err := ec.Count(ctx, sh.Index, sh.Shard, sc0.Node, -1, -1)
	if err != nil {
		return nil, false, aborted("%v", err)
	}
	listed, err := ec.ListShard(ctx, sh.Index, sh.Shard, sc0.Node, s.cfg.PageSize, s.cfg.Listing, func(refs []es.DocRef) error {
		ids := make([]any, len(refs))
		for i, r := range refs {
			ids[i] = r.ID
		}
		return addScratch.Run(ctx, rdb, []string{scratch, k.Meta()}, append([]any{int64(scratchTTL / time.Second)}, ids...)...).Err()
	})
	if err != nil {
		return nil, false, aborted("%v", err)
	}
	countAfter, err := ec.Count(ctx, sh.Index, sh.Shard, sc0.Node, -1, -1)
	if err != nil {
		return nil, false, aborted("%v", err)
	}
	mid, err := ec.Stats(ctx, []string{sh.Index})
	if err != nil {
		return nil, false, aborted("%v", err)
	}
	sc1, ok := mid[sh.Index].Shard(sh.Shard)
	if !ok || !sc1.SamePrimary(sc0) {
		return nil, false, aborted("%w during the listing (term %d on node %s, then %d on %s)", es.ErrPrimaryChanged, sc0.PrimaryTerm, sc0.Node, sc1.PrimaryTerm, sc1.Node)
	}
	if sc1.GlobalCheckpoint < sh.Checkpoint {
		return nil, false, aborted("the cluster's view of the shard (global checkpoint %d) is older than the feed's checkpoint %d after the listing", sc1.GlobalCheckpoint, sh.Checkpoint)
	}
	// With no write during the listing, the counts taken around it and the
	// listing must agree exactly.
	if sc1.MaxSeqNo == sc0.MaxSeqNo && (countBefore != listed || countAfter != listed) {
		return nil, false, aborted("listed %d ids but _count said %d before and %d after, with no write in between", listed, countBefore, countAfter)
	}
	if n, err := rdb.SCard(ctx, scratch).Result(); err != nil || n != listed {
		return nil, false, aborted("scratch set holds %d ids, the listing %d (%v)", n, listed, err)
	}
	cands, err := rdb.SDiff(ctx, k.Delivered(sh.UUID, sh.Shard), scratch).Result()
	if err != nil {
		return nil, false, aborted("SDIFF: %v", err)
	}
	log.Debug("listed live ids", "listed", listed, "candidates", len(cands), "took", time.Since(start).String())
	if len(cands) == 0 {
		return nil, false, nil
	}
	if err := ec.Refresh(ctx, sh.Index); err != nil {
		return nil, false, aborted("%v", err)
	}
	present, err := ec.Present(ctx, sh.Index, sh.Shard, sc0.Node, cands)
	if err != nil {
		return nil, false, aborted("%v", err)
	}
	for _, id := range cands {
		ref, ok := present[id]
		switch {
		case !ok:
			gone = append(gone, id)
		case ref.SeqNo > sh.Checkpoint:
			keepGap = true // re-created, not read yet
		}
	}
	if len(gone) == 0 {
		return nil, keepGap, nil
	}
	// Everything the re-check saw must be at or below the global
	// checkpoint: only then can no failover undo the deletes it saw.
	if err := s.waitDurable(ctx, ec, sh, sc0); err != nil {
		return nil, false, aborted("%w", err)
	}
	sort.Strings(gone)
	return gone, keepGap, nil
}

// waitDurable waits until the primary's global checkpoint reaches the max
// seq no it had right after the re-check, under the same primary: the
// relay's settle rule (es.Settle), so a primary on another node, with a new
// term or a new history is es.ErrPrimaryChanged.
func (s *Scanner) waitDurable(ctx context.Context, ec *es.Client, sh Shard, primary es.ShardCheckpoints) error {
	return es.Settle(ctx, sh.Index, sh.Shard, primary, s.cfg.DurableWait, func() (es.ShardCheckpoints, error) {
		st, err := ec.Stats(ctx, []string{sh.Index})
		if err != nil {
			return es.ShardCheckpoints{}, err
		}
		sc, ok := st[sh.Index].Shard(sh.Shard)
		if !ok {
			return sc, errors.New("the shard's primary is not started")
		}
		return sc, nil
	})
}

// commit emits one delete per gone id (stamped with the checkpoint), removes
// them from the delivered set, resets the gap counter (unless a re-creation
// above the checkpoint keeps it) and drops the scratch set, atomically.
func (s *Scanner) commit(ctx context.Context, sh Shard, gone []string, keepGap bool, log *slog.Logger) (Result, error) {
	k := s.cfg.Keys
	id := sh.id()
	var routing []any
	if len(gone) > 0 {
		vals, err := s.cfg.Client.HMGet(ctx, k.Routing(sh.UUID, sh.Shard), gone...).Result()
		if err != nil {
			return Result{}, fmt.Errorf("%w: read routing of %d gone ids: %v", ErrAborted, len(gone), err)
		}
		routing = vals
	}
	b := checkpoint.Batch{DropKeys: []string{k.Scan(sh.UUID, sh.Shard)}}
	res := Result{Deleted: len(gone)}
	if !keepGap {
		b.Gaps = map[checkpoint.ShardID]int64{id: -sh.Gap}
		res.GapCleared = sh.Gap
	}
	if len(gone) > 0 {
		b.Removed = map[checkpoint.ShardID][]string{id: gone}
		b.Events = make([]redisx.Event, len(gone))
		for i, docID := range gone {
			r, _ := routing[i].(string)
			b.Events[i] = redisx.Event{Op: redisx.OpDelete, Index: sh.Index, IndexUUID: sh.UUID, Shard: sh.Shard,
				ID: docID, Routing: r, SeqNo: sh.Checkpoint, Target: sh.Target}
		}
	}
	if err := s.cfg.Store.Commit(ctx, b); err != nil {
		return Result{}, err
	}
	s.deleted.Add(int64(len(gone)))
	if len(gone) > 0 {
		log.Info("emitted deletes", "deletes", len(gone), "checkpoint", sh.Checkpoint)
	}
	return res, nil
}

func intersect(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if in[x] {
			out = append(out, x)
		}
	}
	return out
}
