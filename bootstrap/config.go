package bootstrap

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultPageSize         = 1000
	DefaultWorkers          = 64
	DefaultMaxAttempts      = 5
	DefaultProgressInterval = 5 * time.Second
	DefaultMinBackoff       = 200 * time.Millisecond
	DefaultMaxBackoff       = 10 * time.Second
	// DefaultSettleTimeout bounds how long a view waits for the global
	// checkpoint to pass the ops it may show.
	DefaultSettleTimeout = 30 * time.Second
)

// MaxPageSize bounds Config.PageSize: a page is one search page
// (es.MaxPageSize).
const MaxPageSize = es.MaxPageSize

// Config configures a Copy.
type Config struct {
	// ES is the feed's source cluster. Required. Copy calls its Info (for
	// the listing method); it does not close it.
	ES *es.Client
	// Redis is the feed's Redis: the feed's indices, generations and shard
	// histories are read from it (never written). Required.
	Redis redis.UniversalClient
	// Feed is the feed name. Required.
	Feed string
	// Targets are the index expressions to copy, as the relay's --index
	// takes them (relay.SplitTargets). Default: the expressions the feed
	// recorded for its indices (escf:{feed}:indices, field target).
	Targets []string
	// Hidden lets wildcards of Targets match hidden indices, as the
	// relay's --hidden. The indices the feed recorded are copied either
	// way.
	Hidden bool
	// SkipClosed copies the other indices when one is closed. Default
	// false: a closed index (its documents cannot be read) fails the copy,
	// since a group joining without them would miss them for good.
	SkipClosed bool
	// Handler applies each event (a sink's handler). Required. It is called
	// concurrently (see the package doc); an error aborts the copy and is
	// returned, wrapped, naming the event.
	Handler redisx.Handler
	// Reconciler, when set, is the sink's own listing of the documents it
	// holds (sink.Bulk): after an index is copied, each document it holds
	// that the source no longer has gets a delete. Default nil: the
	// snapshot markers alone say what the source had.
	Reconciler sink.Reconciler
	// PageSize is the number of documents per listing page. Default 1000;
	// at most MaxPageSize.
	PageSize int
	// Workers is the most handler calls in flight. Default 64: batching
	// sinks (bulk, http, file) form their batches from concurrent calls.
	Workers int
	// Listing is how a shard is read: es.ListingPIT, es.ListingScroll, or
	// es.ListingAuto (the default: PIT where the cluster has it).
	Listing string
	// MaxAttempts is how often one shard is read from a new view before
	// the copy fails. Default 5.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the pause before a shard is read
	// again. Defaults 200ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// SettleTimeout bounds the wait for a view to settle. Default 30s.
	SettleTimeout time.Duration
	// Progress, if set, is called after each page with the documents handed
	// so far and the total expected (a progress bar). It is called from one
	// goroutine at a time.
	Progress func(done, total int64)
	// ProgressInterval is how often progress is logged (documents, total,
	// rate, time left). Default 5s; negative: never.
	ProgressInterval time.Duration
	// Logger receives progress and retries. Default slog.Default().
	Logger *slog.Logger
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.ES == nil:
		return errors.New("bootstrap config: ES is nil: pass the source cluster's *es.Client")
	case c.Redis == nil:
		return errors.New("bootstrap config: Redis is nil: pass the feed's Redis client")
	case c.Handler == nil:
		return errors.New("bootstrap config: Handler is nil: pass the sink's handler")
	case c.PageSize < 0 || c.PageSize > MaxPageSize:
		return fmt.Errorf("bootstrap config: PageSize = %d: want 1..%d (index.max_result_window), 0 for %d", c.PageSize, MaxPageSize, DefaultPageSize)
	case c.Workers < 0:
		return fmt.Errorf("bootstrap config: Workers = %d: want > 0, 0 for %d", c.Workers, DefaultWorkers)
	case c.MaxAttempts < 0:
		return fmt.Errorf("bootstrap config: MaxAttempts = %d: want > 0, 0 for %d", c.MaxAttempts, DefaultMaxAttempts)
	case c.Listing != es.ListingAuto && c.Listing != es.ListingPIT && c.Listing != es.ListingScroll:
		return fmt.Errorf("bootstrap config: Listing = %q: want %q, %q or \"\" (auto)", c.Listing, es.ListingPIT, es.ListingScroll)
	case c.MinBackoff < 0 || c.MaxBackoff < 0 || (c.MaxBackoff > 0 && c.MaxBackoff < c.MinBackoff):
		return fmt.Errorf("bootstrap config: backoff %s..%s is not a range", c.MinBackoff, c.MaxBackoff)
	case c.SettleTimeout < 0:
		return fmt.Errorf("bootstrap config: SettleTimeout = %s: want > 0", c.SettleTimeout)
	}
	if err := redisx.ValidateFeed(c.Feed); err != nil {
		return fmt.Errorf("bootstrap config: Feed: %w", err)
	}
	seen := map[string]bool{}
	for _, t := range c.Targets {
		if t == "" {
			return errors.New("bootstrap config: a target expression is empty")
		}
		if seen[t] {
			return fmt.Errorf("bootstrap config: target %q is named twice", t)
		}
		seen[t] = true
	}
	if c.Reconciler != nil {
		if err := c.Reconciler.Reconcilable(); err != nil {
			return fmt.Errorf("bootstrap config: Reconciler: %w", err)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = DefaultSettleTimeout
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Result is what a Copy handed.
type Result struct {
	// Documents are the upserts handed per index name (the counts of its
	// snapshot_end): the documents of its shards' views that the relay
	// had delivered.
	Documents map[string]int64
	// Deferred are the documents of the views whose version the relay had
	// not delivered yet (above its checkpoint of the shard), per index
	// name: the stream carries them after the recorded position.
	Deferred map[string]int64
	// Removed are the deletes the reconciliation handed per index name:
	// documents the sink held that the source no longer has.
	Removed map[string]int64
	// Kept are documents the sink held from an older index of the name
	// that no delete could be ordered for (see docs/DESIGN.md, Bootstrap),
	// per index name; they stay in the sink.
	Kept map[string]int64
	// Skipped are the indices not copied, with the reason (not yet
	// followed by the relay, closed with SkipClosed, deleted during the
	// copy, sequence numbers disabled).
	Skipped map[string]string
	// Duration is how long the copy took.
	Duration time.Duration
}

// Total is the number of upserts handed.
func (r Result) Total() int64 {
	var n int64
	for _, c := range r.Documents {
		n += c
	}
	return n
}
