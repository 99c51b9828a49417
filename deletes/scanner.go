package deletes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// Defaults for Config fields left at their zero value.
const (
	// DefaultInterval is no least time between two scans of a shard: they
	// are paced by Budget.
	DefaultInterval = 0
	// DefaultBudget is the share of wall time a shard's scans may keep the
	// cluster busy: 10%.
	DefaultBudget            = 0.1
	DefaultMaxDeleteFraction = 0.5
	DefaultPageSize          = 5000
	DefaultDurableWait       = 30 * time.Second
	// scratchTTL bounds the life of a scan's scratch set if the relay dies
	// mid-scan.
	scratchTTL = time.Hour
)

// ErrAborted wraps every reason a scan stopped without emitting anything.
var ErrAborted = errors.New("delete scan aborted")

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
	// Interval is the least time between two scans of a shard
	// (--delete-scan-interval). With one, a shard's first scan waits an
	// interval too. Default 0: none, scans are paced by Budget alone.
	Interval time.Duration
	// Budget is the share of wall time a shard's scans may keep the cluster
	// busy (--delete-scan-budget): after a scan whose requests took c
	// (es.RequestStats), the shard is not scanned again for
	// c·(1−Budget)/Budget, so its scans take at most that share of the
	// time. A shard is scanned only when the gap proof says a document may
	// be gone, and a scan costs tens of milliseconds, so a shard with
	// deletes is scanned at every round. Default DefaultBudget (0.1); 1:
	// no pause.
	Budget float64
	// MaxDeleteFraction: a scan that would delete more than this fraction
	// of a shard's delivered ids is confirmed by a second, independent scan
	// before anything is emitted. Default 0.5.
	MaxDeleteFraction float64
	// Listing is how a shard still on the delivered set of the version
	// before ranges is listed, once, to move it into ranges: es.ListingPIT,
	// es.ListingScroll or es.ListingAuto (default: PIT where the cluster
	// has it).
	Listing string
	// PageSize is that listing's page size. Default 5000.
	PageSize int
	// DurableWait bounds the wait for the global checkpoint to cover what a
	// re-check saw. Default 30s.
	DurableWait time.Duration
	// Logger receives scan logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics registers the escf_delete_* and escf_deletes_found_total
	// series (metrics.go). Default nil: not registered.
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
	case c.Budget < 0 || c.Budget > 1:
		return fmt.Errorf("deletes config: Budget = %g: want a share of wall time in (0, 1]", c.Budget)
	case c.MaxDeleteFraction < 0 || c.MaxDeleteFraction > 1:
		return fmt.Errorf("deletes config: MaxDeleteFraction = %g: want 0..1", c.MaxDeleteFraction)
	case c.Listing != es.ListingAuto && c.Listing != es.ListingPIT && c.Listing != es.ListingScroll:
		return fmt.Errorf("deletes config: Listing = %q: want pit or scroll", c.Listing)
	case c.PageSize < 0 || c.PageSize > es.MaxPageSize:
		return fmt.Errorf("deletes config: PageSize = %d: want 1..%d", c.PageSize, es.MaxPageSize)
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
	// Listings: live-id listings run (a confirmed scan lists twice). Only
	// a shard's first scan after the upgrade to delivered ranges lists.
	Listings int64
	// ListedIDs: ids those listings returned.
	ListedIDs int64
	// Localized: scans that compared the delivered ranges with the
	// cluster's histogram and read only the ranges that differed.
	Localized int64
	// Migrated: scans that moved a shard's delivered set into ranges.
	Migrated int64
	// RangesCompared and RangesDiffered: delivered ranges compared with
	// the cluster's counts, and those found different (and read).
	RangesCompared, RangesDiffered int64
	// SeqNosRead: live seq nos read in differing ranges.
	SeqNosRead int64
	// StaleRemoved: entries removed because their document moved to a
	// later seq no.
	StaleRemoved int64
	// Confirmations: scans over MaxDeleteFraction that listed a second time.
	Confirmations int64
	// Aborted: scans stopped by a partial view, an error or a failover.
	Aborted int64
	// Deletes: delete events committed.
	Deletes int64
	// Requests and ClusterTime: the requests scans made to the cluster,
	// and how long they took (es.RequestStats).
	Requests    int64
	ClusterTime time.Duration
}

// Scanner finds delivered documents that are gone. Its Scan is called by
// the relay between the shard reads of an index, which is what orders a
// delete before any re-creation. It is safe for concurrent use on
// different shards.
type Scanner struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// next is when each shard may be scanned again (Interval, Budget).
	next map[checkpoint.ShardID]time.Time
	// aborts counts each shard's scans that aborted in a row.
	aborts map[checkpoint.ShardID]int
	// ranged are the shards known to hold no delivered set of the layout
	// before ranges (nothing writes one any more).
	ranged     map[checkpoint.ShardID]bool
	lastReport time.Time
	// engineKnown: filterByFilterEngine is the cluster's
	// es.Info.CountsFilterByFilter, read by the first scan that descends.
	engineKnown, filterByFilterEngine bool

	due, savedGap, savedCount, listings, confirmations, aborted, deleted atomic.Int64
	listedIDs, localized, migrated, rangesCompared, rangesDiffered       atomic.Int64
	seqNosRead, staleRemoved, requests, clusterNanos                     atomic.Int64
}

// New returns a Scanner.
func New(cfg Config) (*Scanner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Budget == 0 {
		cfg.Budget = DefaultBudget
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
	s := &Scanner{cfg: cfg, log: cfg.Logger, next: map[checkpoint.ShardID]time.Time{}, aborts: map[checkpoint.ShardID]int{},
		ranged: map[checkpoint.ShardID]bool{}}
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
		Deletes: s.deleted.Load(), ListedIDs: s.listedIDs.Load(), Localized: s.localized.Load(), Migrated: s.migrated.Load(),
		RangesCompared: s.rangesCompared.Load(), RangesDiffered: s.rangesDiffered.Load(), SeqNosRead: s.seqNosRead.Load(),
		StaleRemoved: s.staleRemoved.Load(), Requests: s.requests.Load(), ClusterTime: time.Duration(s.clusterNanos.Load())}
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
	// NoSeqNoPoints: the index has doc values but no points on _seq_no
	// (es.IndexSettings.SeqNoDocValuesOnly). A count of a range of seq nos
	// then scans the shard's doc values, so the scan counts every range with
	// histograms (one doc-values pass) instead of descending.
	NoSeqNoPoints bool
	// Refreshed is the shard's primary as the stats read before the relay's
	// last refresh of the index showed it (zero: unknown). When the scan
	// finds the same primary and that global checkpoint covers Checkpoint,
	// every op up to Checkpoint is already searchable on that copy, and the
	// scan does not force a refresh of its own before its count.
	Refreshed es.ShardCheckpoints
}

// refreshedAt: the relay's last refresh came after every op up to the
// checkpoint was processed on the primary sc (the same primary: node, term
// and history, and its global checkpoint then covered the checkpoint), so
// those ops are searchable there without another refresh.
func (sh Shard) refreshedAt(sc es.ShardCheckpoints) bool {
	return sh.Refreshed.Node != "" && sc.SamePrimary(sh.Refreshed) && sh.Refreshed.GlobalCheckpoint >= sh.Checkpoint
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
	// Requests and ClusterTime: the scan's requests to the cluster and how
	// long they took.
	Requests    int64
	ClusterTime time.Duration
}

// Scan scans one shard if it is due: first the gap proof, then the count
// proof, then the ranges that differ. A shard is due when the least
// Interval since its last scan has passed and the pause its last scan's
// cluster time earned (Budget); an aborted scan leaves its shard due at
// once, the second abort in a row paced like any scan. It commits the
// deletes it confirms, with the removal of their entries and the gap
// reset, in one transaction. An error wraps ErrAborted (nothing was
// emitted; the shard is scanned again at a later round) or is a commit
// error.
func (s *Scanner) Scan(ctx context.Context, sh Shard) (Result, error) {
	id := sh.id()
	now := time.Now()
	s.mu.Lock()
	next, seen := s.next[id]
	if !seen && s.cfg.Interval > 0 {
		// With an interval the first scan of a shard waits it too: at
		// startup every shard would otherwise be scanned at once.
		s.next[id] = now.Add(s.cfg.Interval)
		s.mu.Unlock()
		return Result{}, nil
	}
	if now.Before(next) {
		s.mu.Unlock()
		return Result{}, nil
	}
	s.mu.Unlock()
	s.due.Add(1)
	defer s.report()
	var rs es.RequestStats
	res, err := s.scan(es.WithRequestStats(ctx, &rs), sh)
	res.Scanned = true
	res.Requests, res.ClusterTime = rs.Requests(), rs.Time()
	s.requests.Add(res.Requests)
	s.clusterNanos.Add(int64(res.ClusterTime))
	// The next scan waits the interval and the pause this one's cluster
	// time earned, counted from its end.
	pause := max(s.cfg.Interval, time.Duration(float64(res.ClusterTime)*(1-s.cfg.Budget)/s.cfg.Budget))
	s.log.Debug("delete scan done", logkey.Index, sh.Index, logkey.Shard, sh.Shard, logkey.Requests, res.Requests,
		logkey.ClusterTime, res.ClusterTime, logkey.NextScanIn, pause, logkey.Deletes, res.Deleted, logkey.Error, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrAborted) {
			s.aborted.Add(1)
		}
		// Once at once (a passing fault), then paced.
		s.aborts[id]++
		if s.aborts[id] > 1 {
			s.next[id] = time.Now().Add(pause)
		}
		return res, err
	}
	delete(s.aborts, id)
	s.next[id] = time.Now().Add(pause)
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
	s.log.Info("delete scans so far", logkey.Due, st.Due, logkey.SavedByGapProof, st.SavedByGap, logkey.SavedByCountProof, st.SavedByCount,
		logkey.Localized, st.Localized, logkey.RangesCompared, st.RangesCompared, logkey.RangesDiffered, st.RangesDiffered, logkey.SeqNosRead, st.SeqNosRead,
		logkey.Listings, st.Listings, logkey.ListedIDs, st.ListedIDs, logkey.Migrated, st.Migrated, logkey.Confirmations, st.Confirmations, logkey.Aborted, st.Aborted, logkey.Deletes, st.Deletes)
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
