package consumer

import (
	"context"
	"errors"
	"fmt"
	"github.com/es-changefeed/es-changefeed/redisx"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/backoff"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
)

// Defaults for PoolConfig fields left at their zero value.
const (
	DefaultWorkers         = 8
	DefaultBlock           = 2 * time.Second
	DefaultMinIdle         = 60 * time.Second
	DefaultMaxDeliveries   = 10
	DefaultRetryBackoff    = 100 * time.Millisecond
	DefaultMaxRetryBackoff = 5 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultStart: a new group starts at the beginning of the stream.
	DefaultStart = "0"
)

// DefaultDeadConsumerIdle is how long a consumer with nothing pending must
// have been idle before a pool removes it from the group (5 × MinIdle when
// that is longer).
const DefaultDeadConsumerIdle = 5 * time.Minute

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Client is the feed's Redis. Required.
	Client redis.UniversalClient
	// Keys names the feed's stream and dead-letter stream. Required.
	Keys redisx.Keys
	// Group is the consumer group. Required.
	Group string
	// Consumer is this consumer's name in the group. Default "<host>-<pid>".
	Consumer string
	// Workers is the number of lanes: events of one document always go to
	// the same lane, so they are handled one at a time, in order. Default 8.
	Workers int
	// Start is where a group created by the pool starts: "0" (the whole
	// stream) or "$" (new events only). Default DefaultStart ("0").
	Start string
	// Prefetch bounds the events read but not yet done (queued and being
	// handled). Default 16 × Workers. Held events are kept ours with an
	// idle-time refresh, so a long queue is never reclaimed by others.
	Prefetch int
	// Block is how long one XREADGROUP waits for new events. Default 2s.
	Block time.Duration
	// MinIdle is how long an event must be pending and untouched before
	// another consumer may reclaim it (its consumer died). Default 60s.
	MinIdle time.Duration
	// MaxDeliveries is how many times an event is handed to a handler
	// before it goes to the dead-letter stream. Default 10.
	MaxDeliveries int64
	// RetryBackoff is the first pause before retrying a failed event; it
	// doubles each time, up to MaxRetryBackoff, each pause jittered down
	// to between half and all of it (backoff.Delay). Defaults 100ms and 5s.
	RetryBackoff, MaxRetryBackoff time.Duration
	// ShutdownTimeout bounds how long the events read may take to be
	// handled once Run's context ends. Default 30s.
	ShutdownTimeout time.Duration
	// DeadConsumerIdle: other consumers of the group idle this long with
	// nothing pending are removed from it (they stopped without removing
	// themselves: killed). Default DefaultDeadConsumerIdle, or 5 × MinIdle
	// when longer.
	DeadConsumerIdle time.Duration
	// Logger receives the pool's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics registers the pool's collectors (escf_consumer_events_total,
	// escf_handler_duration_seconds). Default nil: not registered.
	Metrics prometheus.Registerer
	// Positions, when set, is where the sink records how far it applied
	// the stream, in its own store (see Positions): recorded before each
	// read's entries are handed on, read at the start. It lets the pool
	// tell a feed's Redis that lost entries the sink applied (the pool
	// stops with a *StreamRolledBackError) from one that did not, after
	// any restart, and hand entries on again to a sink whose store lost
	// writes. Default nil: the pool checks only the entries it handed on
	// itself since it started.
	Positions redisx.Positions
	// RepairGrace is how long the pool waits, having found that the feed's
	// Redis lost entries it handed on, for the relay to record that it
	// repaired the loss (a relay that lived through it does so at once; one
	// started afterwards never does) before it stops with a
	// *StreamRolledBackError. Default DefaultRepairGrace.
	RepairGrace time.Duration
}

// DefaultRepairGrace is PoolConfig.RepairGrace when zero: three times the
// relay's default lease TTL, time for a relay that lived through a Redis
// restart to notice it, take its lease again and record the repair.
const DefaultRepairGrace = 30 * time.Second

// Validate names the first bad field.
func (c PoolConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("pool config: Client is nil")
	case c.Keys.Feed() == "":
		return errors.New("pool config: redisx.Keys is empty (use redisx.NewKeys)")
	case c.Group == "":
		return errors.New("pool config: Group is empty: name the consumer group")
	case c.Workers < 0 || c.Workers > 4096:
		return fmt.Errorf("pool config: Workers = %d: want 1..4096", c.Workers)
	case c.Start != "" && c.Start != "0" && c.Start != "$":
		return fmt.Errorf("pool config: Start = %q: want \"0\" (the whole stream) or \"$\" (new events only)", c.Start)
	case c.Prefetch < 0:
		return fmt.Errorf("pool config: Prefetch = %d: want > 0", c.Prefetch)
	case c.MinIdle < 0 || (c.MinIdle > 0 && c.MinIdle < 40*time.Millisecond):
		return fmt.Errorf("pool config: MinIdle = %s: want at least 40ms", c.MinIdle)
	case c.MaxDeliveries < 0:
		return fmt.Errorf("pool config: MaxDeliveries = %d: want >= 1", c.MaxDeliveries)
	case c.DeadConsumerIdle != 0 && c.DeadConsumerIdle < c.MinIdle:
		return fmt.Errorf("pool config: DeadConsumerIdle = %s: want at least MinIdle (%s)", c.DeadConsumerIdle, c.MinIdle)
	case c.Block < 0 || c.RetryBackoff < 0 || c.MaxRetryBackoff < 0 || c.ShutdownTimeout < 0 || c.RepairGrace < 0:
		return errors.New("pool config: durations must not be negative")
	}
	return nil
}

func (c PoolConfig) withDefaults() PoolConfig {
	if c.Consumer == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "consumer"
		}
		c.Consumer = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Start == "" {
		c.Start = DefaultStart
	}
	if c.Prefetch == 0 {
		c.Prefetch = 16 * c.Workers
	}
	if c.Block == 0 {
		c.Block = DefaultBlock
	}
	if c.MinIdle == 0 {
		c.MinIdle = DefaultMinIdle
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.DeadConsumerIdle == 0 {
		c.DeadConsumerIdle = max(DefaultDeadConsumerIdle, 5*c.MinIdle)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RepairGrace == 0 {
		c.RepairGrace = DefaultRepairGrace
	}
	return c
}

// PoolStats count what a pool did; they only grow.
type PoolStats struct {
	// Read is events read from the stream (new, own pending and reclaimed).
	Read int64
	// Handled is handler calls that returned nil.
	Handled int64
	// Failed is handler calls that returned an error.
	Failed int64
	// Acked is events acknowledged after success.
	Acked int64
	// DeadLettered is events moved to the dead-letter stream.
	DeadLettered int64
	// Reclaimed is pending events taken over from idle consumers.
	Reclaimed int64
	// Gone is entries found gone from the stream before they were handled
	// (trimmed or deleted): Run stops with a *HistoryLostError, and they
	// stay pending.
	Gone int64
	// ConsumersRemoved is dead consumers this pool removed from the group
	// (itself at a clean stop included).
	ConsumersRemoved int64
}

// Pool is a worker pool in a Redis consumer group. Run it once.
type Pool struct {
	cfg PoolConfig
	log *slog.Logger
	h   redisx.Handler

	held  sync.Map // stream id -> struct{}: events read and not yet done
	slots chan struct{}
	acks  chan []string
	lanes []chan []*job

	// Events that are not about one document wait until every lane is
	// idle, and run alone: dispatchMu serializes dispatching (reader and
	// reclaimer), busy counts jobs not yet done.
	dispatchMu sync.Mutex
	busy       inflight
	stopped    atomic.Bool

	read, handled, failed, acked, dead, reclaimed, gone, removed atomic.Int64
	metrics                                                      *poolCollector

	// History lost: the first error stops reading (stopReading) and is
	// what Run returns.
	lostMu      sync.Mutex
	lost        error
	stopReading context.CancelFunc

	outage outage

	// The applied position (see Positions): appliedID is the highest
	// entry id handed on (or recorded by the sink before the start);
	// recorded the Lead this pool last recorded in Positions; low the
	// group's low water at the last checked read. replayFrom..replayTo are
	// entries to hand on again (the sink's store lost their writes).
	appliedMu            sync.Mutex
	appliedID, recorded  string
	low                  string
	replayFrom, replayTo string
	coveredSaid          string // the last redisx.Rollback.After logged
}

// outage tracks whether the pool's Redis calls fail, so that an outage is
// logged once (its first error) and its end once — not once per retry of
// each of the pool's loops. Calls are judged by when they began: a call
// that began before the outage was noticed says nothing of its end, one
// that began before its end says nothing of a new one.
type outage struct {
	failing   atomic.Bool
	mu        sync.Mutex
	since     time.Time // the first failure was noticed
	recovered time.Time // the last outage ended
	calls     int
}

// redisFailed logs a failed Redis call that began at began (msg says what
// the failure costs) if it is the first of an outage; others go to the
// debug level.
func (p *Pool) redisFailed(began time.Time, msg string, err error, args ...any) {
	o := &p.outage
	o.mu.Lock()
	first := !o.failing.Load() && !began.Before(o.recovered)
	if first {
		o.failing.Store(true)
		o.since = time.Now()
	}
	o.calls++
	o.mu.Unlock()
	args = append(args, logkey.Error, err.Error())
	if first {
		p.log.Warn(msg, args...)
	} else {
		p.log.Debug(msg, args...)
	}
}

// redisOK notes a Redis call that began at began and succeeded; if it
// began during an outage, the outage is over and its end is logged.
func (p *Pool) redisOK(began time.Time) {
	o := &p.outage
	if !o.failing.Load() {
		return
	}
	o.mu.Lock()
	if !o.failing.Load() || began.Before(o.since) {
		o.mu.Unlock()
		return
	}
	o.failing.Store(false)
	o.recovered = time.Now()
	lasted, calls := o.recovered.Sub(o.since), o.calls
	o.calls = 0
	o.mu.Unlock()
	p.log.Info("Redis answers again; recovered", logkey.FailingFor, lasted.Round(time.Millisecond).String(), logkey.FailedCalls, calls)
}

// job is one event in a lane.
type job struct {
	msg        redis.XMessage
	ev         redisx.Event
	bad        error // the entry could not be decoded
	deliveries int64 // Redis's delivery count when handed to the lane
	// again: handed on again for a sink whose store lost its writes (not
	// necessarily pending: retries are counted here, not claimed).
	again bool
}

// NewPool returns a pool.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Pool{cfg: cfg, log: cfg.Logger.With(logkey.Group, cfg.Group, logkey.Consumer, cfg.Consumer)}
	p.metrics = newPoolCollector(p)
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(p.metrics); err != nil {
			return nil, fmt.Errorf("pool metrics: %w", err)
		}
	}
	return p, nil
}

// Consumer is this pool's consumer name.
func (p *Pool) Consumer() string { return p.cfg.Consumer }

// Stats returns the counters.
func (p *Pool) Stats() PoolStats {
	return PoolStats{Read: p.read.Load(), Handled: p.handled.Load(), Failed: p.failed.Load(), Acked: p.acked.Load(),
		DeadLettered: p.dead.Load(), Reclaimed: p.reclaimed.Load(), Gone: p.gone.Load(), ConsumersRemoved: p.removed.Load()}
}

// Run consumes the feed with h until ctx ends. It creates the group if
// missing, first handles this consumer's own pending events (a restart after
// a crash), then new ones, reclaims the events of consumers idle for
// MinIdle and removes consumers dead for DeadConsumerIdle. When ctx ends it
// stops reading, waits for the read in flight, handles every event read
// (within ShutdownTimeout), acknowledges them, removes this consumer from
// the group when nothing of it is pending, and returns nil. Redis errors
// are retried with backoff; an outage is logged once, and its end once.
//
// The group must see every change: Run returns a *HistoryLostError
// (errors.Is ErrHistoryLost) instead of creating a group at "0" on a stream
// that no longer holds the feed from its start, and stops with one as soon
// as entries the group had not handled are gone from the stream (trimmed or
// deleted: at the start, before each read, in a reclaim). Nothing is
// acknowledged that was not handed to h; the group stays as it is for
// es-changefeed consume --bootstrap.
func (p *Pool) Run(ctx context.Context, h redisx.Handler) error {
	if h == nil {
		return errors.New("pool: nil redisx.Handler")
	}
	p.h = h
	// A stop asked before the first read (ctx ends during these checks)
	// is a clean stop like any other: nothing was read, nothing is owed.
	if err := p.ensureGroup(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := p.checkHistory(ctx); err != nil {
		if ctx.Err() != nil && !errors.Is(err, redisx.ErrHistoryLost) {
			return nil
		}
		return err
	}
	if err := p.startApplied(ctx); err != nil {
		if ctx.Err() != nil && !errors.Is(err, redisx.ErrHistoryLost) {
			return nil
		}
		return err
	}
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	p.stopReading = stopReading
	p.slots = make(chan struct{}, p.cfg.Prefetch)
	for i := 0; i < p.cfg.Prefetch; i++ {
		p.slots <- struct{}{}
	}
	p.acks = make(chan []string, p.cfg.Prefetch)
	// Handlers run on a context that outlives ctx by ShutdownTimeout and
	// says which stream and group their events come from (a sink serving
	// several partitions records what it applied per stream).
	hctx, hcancel := context.WithCancel(redisx.WithDelivery(context.WithoutCancel(ctx),
		redisx.Delivery{Stream: p.cfg.Keys.Events(), Group: p.cfg.Group}))
	defer hcancel()
	var lanes, helpers sync.WaitGroup
	p.lanes = make([]chan []*job, p.cfg.Workers)
	for i := range p.lanes {
		p.lanes[i] = make(chan []*job, p.cfg.Prefetch)
		lanes.Add(1)
		go func(ch chan []*job) {
			defer lanes.Done()
			p.lane(ctx, hctx, ch)
		}(p.lanes[i])
	}
	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		p.acker()
	}()
	bg, stopBG := context.WithCancel(rctx)
	helpers.Add(2)
	go func() { defer helpers.Done(); p.heartbeat(bg) }()
	go func() { defer helpers.Done(); p.reclaimLoop(bg) }()

	// The shutdown timeout runs from the moment ctx ends (or reading
	// stopped on a history loss), the wait for the read in flight included.
	stopTimer := context.AfterFunc(rctx, func() {
		t := time.AfterFunc(p.cfg.ShutdownTimeout, func() {
			p.log.Warn("shutdown timeout: canceling handlers still running; events not handled stay pending", logkey.Timeout, p.cfg.ShutdownTimeout)
			hcancel()
		})
		<-hctx.Done()
		t.Stop()
	})
	defer stopTimer()

	p.readLoop(rctx)

	// Shutdown: no more reading or reclaiming; lanes handle what was read
	// (until the shutdown timeout), then acks are flushed.
	p.stopped.Store(true)
	stopBG()
	helpers.Wait()
	for _, ch := range p.lanes {
		close(ch)
	}
	lanes.Wait()
	hcancel()
	close(p.acks)
	<-ackDone
	p.leaveGroup()
	st := p.Stats()
	p.log.Info("consumer stopped", logkey.Handled, st.Handled, logkey.FailedAttempts, st.Failed, logkey.DeadLettered, st.DeadLettered, logkey.Reclaimed, st.Reclaimed)
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	return p.lost
}

// historyLost records the first loss found and stops reading.
func (p *Pool) historyLost(err error) {
	if p.stopWith(err, "history lost: stopping") {
		p.recordLost(err)
	}
}

// stopWith makes err what Run returns and stops reading, if it is the
// first such error (reported true).
func (p *Pool) stopWith(err error, msg string) bool {
	p.lostMu.Lock()
	first := p.lost == nil
	if first {
		p.lost = err
	}
	p.lostMu.Unlock()
	if first {
		p.log.Error(msg, logkey.Error, err.Error())
		if p.stopReading != nil {
			p.stopReading()
		}
	}
	return first
}

// recordLost writes the loss to the feed's lost hash (the first one stays),
// where status and every later start of the group find it: once the group
// read past a gap, nothing else in Redis shows it.
func (p *Pool) recordLost(err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if werr := p.cfg.Client.HSetNX(ctx, p.cfg.Keys.Lost(), p.cfg.Group, err.Error()).Err(); werr != nil {
		p.log.Warn("cannot record the history loss in Redis", logkey.Key, p.cfg.Keys.Lost(), logkey.Error, werr.Error())
	}
}

// checkHistory reads the group's state and its recorded loss: an error if
// it lost history.
func (p *Pool) checkHistory(ctx context.Context) error {
	rec, err := redisx.RecordedLoss(ctx, p.cfg.Client, p.cfg.Keys, p.cfg.Group)
	if err != nil {
		return fmt.Errorf("read %s: %w", p.cfg.Keys.Lost(), err)
	}
	if rec != "" {
		return fmt.Errorf("%w (recorded in %s when it was found; the group stays refused until re-initialized): %s", redisx.ErrHistoryLost, p.cfg.Keys.Lost(), rec)
	}
	st, g, ok, err := redisx.ReadGroup(ctx, p.cfg.Client, p.cfg.Keys.Events(), p.cfg.Group)
	if err != nil {
		return fmt.Errorf("read consumer group %s: %w", p.cfg.Group, err)
	}
	if ok && g.HistoryLost() {
		p.gone.Add(max(g.Lost(), 1))
		lost := &redisx.HistoryLostError{Feed: p.cfg.Keys.Feed(), Stream: p.cfg.Keys.Events(), State: st, Group: g}
		p.recordLost(lost)
		return lost
	}
	return nil
}

// leaveGroup removes this consumer from the group at a clean stop, when
// nothing is pending in its name (removing it would drop its pending
// entries from the group: never redelivered). Atomic in a script.
func (p *Pool) leaveGroup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	removed, err := removeIdleConsumer.Run(ctx, p.cfg.Client, []string{p.cfg.Keys.Events()}, p.cfg.Group, p.cfg.Consumer, 0).Int()
	switch {
	case err != nil:
		p.log.Warn("cannot remove this consumer from the group; others will once it is idle", logkey.Error, err.Error(), logkey.After, p.cfg.DeadConsumerIdle.String())
	case removed == 1:
		p.removed.Add(1)
		p.log.Debug("removed this consumer from the group")
	default:
		p.log.Info("events stay pending in this consumer's name; they will be reclaimed", logkey.MinIdle, p.cfg.MinIdle.String())
	}
}

// removeIdleConsumer deletes consumer ARGV[2] of group ARGV[1] if nothing
// is pending in its name and it has been idle ARGV[3] ms or more: 1 if
// removed, 0 if not (or absent). Atomic: nothing can be read between the
// check and XGROUP DELCONSUMER, which would drop it from the group's
// pending list.
var removeIdleConsumer = redis.NewScript(`
local ok, cs = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
for _, c in ipairs(cs) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] == ARGV[2] then
    if tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[3]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
`)

// ensureGroup creates the group (and the stream) if missing; not at "0" on
// a stream that no longer holds the feed from its start.
func (p *Pool) ensureGroup(ctx context.Context) error {
	if p.cfg.Start == "0" {
		st, g, ok, err := redisx.ReadGroup(ctx, p.cfg.Client, p.cfg.Keys.Events(), p.cfg.Group)
		if err != nil {
			return fmt.Errorf("read consumer group %s: %w", p.cfg.Group, err)
		}
		if !ok && !st.Complete() {
			return &redisx.HistoryLostError{Feed: p.cfg.Keys.Feed(), Stream: p.cfg.Keys.Events(), State: st, Group: g, New: true}
		}
	}
	err := p.cfg.Client.XGroupCreateMkStream(ctx, p.cfg.Keys.Events(), p.cfg.Group, p.cfg.Start).Err()
	if err == nil {
		p.log.Info("created consumer group", logkey.Stream, p.cfg.Keys.Events(), logkey.Start, p.cfg.Start)
		return nil
	}
	if redis.HasErrorPrefix(err, "BUSYGROUP") {
		return nil
	}
	return fmt.Errorf("create consumer group %s on %s: %w", p.cfg.Group, p.cfg.Keys.Events(), err)
}

// readLoop reads this consumer's own pending entries, then new ones, until
// ctx ends. It reads only as many entries as there are free slots. New
// entries are read first without blocking, together with the group's state
// (readChecked); only when there are none does it block for Block.
func (p *Pool) readLoop(ctx context.Context) {
	own := "0" // first: our own pending entries, from the start
	bo := backoff.Backoff{Min: p.cfg.RetryBackoff, Max: p.cfg.MaxRetryBackoff}
	for ctx.Err() == nil {
		n := p.takeSlots(ctx)
		if n == 0 {
			return
		}
		start := ">"
		if own != "" {
			start = own
		}
		if from, to := p.replaying(); own == "" && from != "" {
			if err := p.replay(ctx, from, to, n); err != nil {
				p.giveSlots(n)
				if errors.Is(err, redisx.ErrHistoryLost) {
					p.historyLost(err)
					return
				}
				if ctx.Err() != nil {
					return
				}
				d := bo.Next()
				p.redisFailed(time.Now(), "reading entries to hand on again failed; retrying", err, logkey.RetryIn, d.String())
				sleepCtx(ctx, d)
			}
			continue
		}
		began := time.Now()
		var res []redis.XStream
		var err error
		if own == "" {
			var last string
			res, last, err = p.readChecked(ctx, n)
			var rb *redisx.StreamRolledBackError
			if errors.As(err, &rb) {
				// Hand on what was read once the relay says it repaired the
				// loss; otherwise it stays pending.
				err = p.awaitRepair(ctx, rb)
				if ctx.Err() != nil {
					p.giveSlots(n)
					return
				}
			}
			if err == nil && len(res) == 0 {
				err = p.waitNew(ctx, last) // then read them, checked
			}
		} else {
			res, err = p.readGroup(ctx, start, n)
		}
		if errors.Is(err, redisx.ErrHistoryLost) {
			p.giveSlots(n)
			p.historyLost(err)
			return
		}
		if err == nil || errors.Is(err, redis.Nil) {
			p.redisOK(began)
		}
		if errors.Is(err, redis.Nil) || (err == nil && len(res) == 0) {
			p.giveSlots(n)
			if own != "" {
				own = "" // no more pending of ours: switch to new entries
			}
			continue
		}
		if err != nil {
			p.giveSlots(n)
			if ctx.Err() != nil {
				return
			}
			if redis.HasErrorPrefix(err, "NOGROUP") {
				if err := p.ensureGroup(ctx); errors.Is(err, redisx.ErrHistoryLost) {
					p.historyLost(err)
					return
				}
			}
			d := bo.Next()
			p.redisFailed(began, "read failed; retrying", err, logkey.RetryIn, d.String())
			sleepCtx(ctx, d)
			continue
		}
		bo.Reset()
		msgs := res[0].Messages
		if !p.advance(ctx, msgs) {
			p.giveSlots(n) // read, not handed on: pending, delivered again
			return
		}
		p.giveSlots(n - len(msgs))
		if ctx.Err() != nil && len(msgs) > 0 {
			// Stopping: the read in flight returned these; they are
			// handled (Run waits), not left pending in our name.
			p.dispatch(msgs, p.deliveryCounts(context.WithoutCancel(ctx), msgs))
			return
		}
		if own != "" {
			if len(msgs) == 0 {
				own = ""
				continue
			}
			own = msgs[len(msgs)-1].ID
			p.dispatch(msgs, p.deliveryCounts(ctx, msgs))
			continue
		}
		p.dispatch(msgs, nil)
	}
}

// readGroup runs one XREADGROUP of this consumer's own pending entries
// (start is an id, so it does not block). Own pending entries whose payload
// is gone are history lost.
func (p *Pool) readGroup(ctx context.Context, start string, n int) ([]redis.XStream, error) {
	res, err := p.cfg.Client.XReadGroup(context.WithoutCancel(ctx), &redis.XReadGroupArgs{
		Group: p.cfg.Group, Consumer: p.cfg.Consumer, Streams: []string{p.cfg.Keys.Events(), start},
		Count: int64(n), Block: p.cfg.Block,
	}).Result()
	if err == nil && start != ">" && len(res) > 0 {
		for _, m := range res[0].Messages {
			if m.Values == nil {
				return nil, p.pendingGone(ctx, m.ID)
			}
		}
	}
	return res, err
}

// readChecked reads up to n new entries without blocking, in one MULTI
// with XINFO STREAM and XINFO GROUPS: the group's state just before the
// read. If entries the group had not read are gone (a trim past it, an
// XDEL), the read's entries are not handed on: reading past the gap would
// hide it, so this is the one place that can see it every time. It returns
// no streams when there is nothing new, and the group's last delivered id
// (for waitNew).
func (p *Pool) readChecked(ctx context.Context, n int) ([]redis.XStream, string, error) {
	stream := p.cfg.Keys.Events()
	var infoS *redis.XInfoStreamCmd
	var infoG *redis.XInfoGroupsCmd
	var pend *redis.XPendingCmd
	var read *redis.XStreamSliceCmd
	var chk appliedCheck
	applied, recorded := p.appliedState()
	_, err := p.cfg.Client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		infoS = pipe.XInfoStream(ctx, stream)
		infoG = pipe.XInfoGroups(ctx, stream)
		pend = pipe.XPending(ctx, stream, p.cfg.Group)
		if applied != "" {
			chk.queue(ctx, pipe, p.cfg.Keys, applied)
		}
		if recorded != "" {
			// After the sink's own record: a sink's store holding less
			// lost writes (startApplied).
			maxIDScript.Eval(ctx, pipe, []string{p.cfg.Keys.Applied()}, p.cfg.Group, recorded)
		}
		read = pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: p.cfg.Group, Consumer: p.cfg.Consumer,
			Streams: []string{stream, ">"}, Count: int64(n), Block: -1})
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", err
	}
	st := redisx.StreamStateOf(infoS.Val())
	last := ""
	for _, g := range infoG.Val() {
		if g.Name != p.cfg.Group {
			continue
		}
		last = g.LastDeliveredID
		if gs, _ := redisx.Unread(st, g); gs.LostUnread != 0 {
			p.gone.Add(max(gs.LostUnread, 1))
			return nil, last, &redisx.HistoryLostError{Feed: p.cfg.Keys.Feed(), Stream: stream, State: st, Group: gs}
		}
		covered, verr := chk.verdict(p.cfg.Keys, p.cfg.Group, st, last, applied)
		var rb *redisx.StreamRolledBackError
		if errors.As(verr, &rb) {
			// The entries read go back to the caller with the error: they
			// are handed on if the relay records the repair in time.
			res, rerr := read.Result()
			if errors.Is(rerr, redis.Nil) {
				rerr = nil
			}
			if rerr != nil {
				return nil, last, rerr
			}
			return res, last, verr
		}
		if verr != nil {
			return nil, last, verr
		}
		p.appliedChecked(covered, applied, lowWater(last, pend.Val()))
	}
	res, err := read.Result()
	if errors.Is(err, redis.Nil) {
		return nil, last, nil
	}
	return res, last, err
}

// waitNew blocks (up to Block) until the stream has an entry after last,
// with XREAD, which delivers nothing to the group: the entries are then
// read by readChecked, with the check. (A blocking XREADGROUP would hand
// them over unchecked: a MULTI that adds entries and trims past the group
// serves a blocked reader only after its trim.) Abandoned when ctx ends.
func (p *Pool) waitNew(ctx context.Context, last string) error {
	if last == "" {
		last = "$"
	}
	done := make(chan error, 1)
	go func() {
		err := p.cfg.Client.XRead(context.WithoutCancel(ctx), &redis.XReadArgs{Streams: []string{p.cfg.Keys.Events(), last},
			Count: 1, Block: p.cfg.Block}).Err()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}

// pendingGone is the history-lost error for a pending entry whose payload
// is gone (id: one of them).
func (p *Pool) pendingGone(ctx context.Context, id string) error {
	st, g, _, err := redisx.ReadGroup(context.WithoutCancel(ctx), p.cfg.Client, p.cfg.Keys.Events(), p.cfg.Group)
	if err != nil {
		return fmt.Errorf("pending entry %s is gone from the stream (%w), and reading the group failed: %w", id, redisx.ErrHistoryLost, err)
	}
	if g.LostPending <= 0 {
		g.LostPending, g.FirstLostPending = 1, id
	}
	p.gone.Add(g.LostPending)
	return &redisx.HistoryLostError{Feed: p.cfg.Keys.Feed(), Stream: p.cfg.Keys.Events(), State: st, Group: g}
}

// takeSlots waits for at least one free slot and takes the free ones,
// giving lanes that are about to finish a moment (up to 1ms) to free half
// of them: fewer, larger reads.
func (p *Pool) takeSlots(ctx context.Context) int {
	select {
	case <-ctx.Done():
		return 0
	case <-p.slots:
	}
	n := 1
	want := max(1, p.cfg.Prefetch/2)
	var deadline <-chan time.Time
	for n < p.cfg.Prefetch {
		select {
		case <-p.slots:
			n++
			continue
		default:
		}
		if n >= want {
			return n
		}
		if deadline == nil {
			deadline = time.After(time.Millisecond)
		}
		select {
		case <-p.slots:
			n++
		case <-deadline:
			return n
		case <-ctx.Done():
			return n
		}
	}
	return n
}

func (p *Pool) giveSlots(n int) {
	for i := 0; i < n; i++ {
		p.slots <- struct{}{}
	}
}

// deliveryCounts reads the delivery counts of pending entries of ours.
func (p *Pool) deliveryCounts(ctx context.Context, msgs []redis.XMessage) map[string]int64 {
	out := make(map[string]int64, len(msgs))
	for _, m := range msgs {
		out[m.ID] = 1
	}
	if len(msgs) == 0 {
		return out
	}
	pend, err := p.cfg.Client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: p.cfg.Keys.Events(), Group: p.cfg.Group,
		Start: msgs[0].ID, End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)), Consumer: p.cfg.Consumer}).Result()
	if err != nil {
		return out
	}
	for _, e := range pend {
		out[e.ID] = e.RetryCount
	}
	return out
}

// dispatch hands a read's entries to their lanes, one slice per lane (few
// goroutine wake-ups). deliveries gives each entry's delivery count (nil:
// fresh reads, count 1). Entries that are not about one document are
// barriers: everything before them is done first, they run alone, and
// nothing after them starts before they are done.
func (p *Pool) dispatch(msgs []redis.XMessage, deliveries map[string]int64) {
	p.dispatchJobs(msgs, deliveries, false)
}

// dispatchJobs is dispatch; again marks entries handed on again (see
// Pool.replay): not held, not acknowledged.
func (p *Pool) dispatchJobs(msgs []redis.XMessage, deliveries map[string]int64, again bool) {
	p.dispatchMu.Lock()
	defer p.dispatchMu.Unlock()
	perLane := make([][]*job, len(p.lanes))
	flush := func() {
		for i, js := range perLane {
			if len(js) > 0 {
				p.lanes[i] <- js
				perLane[i] = nil
			}
		}
	}
	for _, m := range msgs {
		p.read.Add(1)
		if !again {
			p.held.Store(m.ID, struct{}{})
		}
		p.busy.add()
		j := &job{msg: m, deliveries: 1, again: again}
		if deliveries != nil {
			j.deliveries = deliveries[m.ID]
		}
		j.ev, j.bad = redisx.ParseEvent(m)
		if j.bad != nil || !j.ev.Op.Document() {
			flush()
			p.busy.waitBelow(2)
			p.lanes[0] <- []*job{j}
			p.busy.waitBelow(1)
			continue
		}
		l := laneOf(j.ev, len(p.lanes))
		perLane[l] = append(perLane[l], j)
	}
	flush()
}

// inflight counts jobs dispatched and not yet done.
type inflight struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

func (f *inflight) lock() {
	f.mu.Lock()
	if f.cond == nil {
		f.cond = sync.NewCond(&f.mu)
	}
}

func (f *inflight) add() {
	f.lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done(n int) {
	f.lock()
	f.n -= n
	f.cond.Broadcast()
	f.mu.Unlock()
}

// waitBelow waits until fewer than n jobs are in flight.
func (f *inflight) waitBelow(n int) {
	f.lock()
	for f.n >= n {
		f.cond.Wait()
	}
	f.mu.Unlock()
}

// laneOf maps a document to a lane.
func laneOf(e redisx.Event, n int) int {
	h := fnv.New32a()
	h.Write([]byte(e.IndexUUID))
	h.Write([]byte{'/'})
	h.Write([]byte(strconv.Itoa(e.Shard)))
	h.Write([]byte{'/'})
	h.Write([]byte(e.ID))
	return int(h.Sum32() % uint32(n))
}

// lane handles its jobs in order, the queued ones too after Run's context
// ends, until the shutdown timeout cancels hctx: the jobs not started then
// stay pending. Acks and slots are returned per slice.
func (p *Pool) lane(ctx, hctx context.Context, ch chan []*job) {
	for js := range ch {
		var acked []string
		for _, j := range js {
			if hctx.Err() != nil {
				p.held.Delete(j.msg.ID) // not started: stays pending for a later start
				continue
			}
			if p.handle(ctx, hctx, j) && !j.again {
				acked = append(acked, j.msg.ID)
			}
		}
		if len(acked) > 0 {
			p.acks <- acked
		}
		p.busy.done(len(js))
		p.giveSlots(len(js))
	}
}

// handle runs the handler, retrying with backoff (each retry is a new
// delivery: XCLAIM to ourselves) until it succeeds, fails permanently, or
// reached MaxDeliveries: then the event is dead-lettered. It reports whether
// the event is to be acknowledged; otherwise it is done with (dead-lettered,
// gone) or released (stays pending).
func (p *Pool) handle(ctx, hctx context.Context, j *job) bool {
	if j.bad != nil {
		p.deadLetter(hctx, j, j.bad)
		return false
	}
	pause := backoff.Backoff{Min: p.cfg.RetryBackoff, Max: p.cfg.MaxRetryBackoff}
	for {
		start := time.Now()
		err := p.h(hctx, j.ev)
		p.metrics.latency.Observe(time.Since(start).Seconds())
		if err == nil {
			p.handled.Add(1)
			return true
		}
		p.failed.Add(1)
		if redisx.IsPermanent(err) || j.deliveries >= p.cfg.MaxDeliveries {
			p.deadLetter(hctx, j, err)
			return false
		}
		select {
		case <-ctx.Done():
			p.held.Delete(j.msg.ID) // retried by the next start or another consumer
			return false
		case <-time.After(pause.Next()):
		}
		if j.again {
			j.deliveries++
			continue
		}
		began := time.Now()
		claimed, cerr := p.cfg.Client.XClaim(hctx, &redis.XClaimArgs{Stream: p.cfg.Keys.Events(), Group: p.cfg.Group,
			Consumer: p.cfg.Consumer, MinIdle: 0, Messages: []string{j.msg.ID}}).Result()
		switch {
		case cerr != nil:
			p.redisFailed(began, "cannot count a retry; the event stays pending", cerr, logkey.ID, j.msg.ID)
			p.held.Delete(j.msg.ID)
			return false
		case len(claimed) == 0:
			p.held.Delete(j.msg.ID) // acknowledged elsewhere or trimmed meanwhile
			return false
		}
		j.deliveries++
	}
}

// deadLetter moves an event to the dead-letter stream and acknowledges it,
// in one MULTI.
func (p *Pool) deadLetter(ctx context.Context, j *job, cause error) {
	vals := make([]any, 0, 2*len(j.msg.Values)+12)
	for k, v := range j.msg.Values {
		vals = append(vals, k, v)
	}
	vals = append(vals, "error", cause.Error(), "deliveries", strconv.FormatInt(j.deliveries, 10),
		"group", p.cfg.Group, "consumer", p.cfg.Consumer, "stream_id", j.msg.ID,
		"failed_at", time.Now().UTC().Format(time.RFC3339Nano))
	began := time.Now()
	_, err := p.cfg.Client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: p.cfg.Keys.Dead(), Values: vals})
		pipe.XAck(ctx, p.cfg.Keys.Events(), p.cfg.Group, j.msg.ID)
		return nil
	})
	p.held.Delete(j.msg.ID)
	if err != nil {
		p.redisFailed(began, "cannot dead-letter the event; it stays pending", err, logkey.ID, j.msg.ID)
		return
	}
	p.redisOK(began)
	p.dead.Add(1)
	p.log.Warn("event dead-lettered", logkey.ID, j.msg.ID, logkey.Deliveries, j.deliveries, logkey.Error, cause.Error(), logkey.DeadLetters, p.cfg.Keys.Dead())
}

// acker acknowledges in batches: up to 256 ids, or what arrived within 2ms.
func (p *Pool) acker() {
	var batch []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		began := time.Now()
		err := p.cfg.Client.XAck(ctx, p.cfg.Keys.Events(), p.cfg.Group, batch...).Err()
		cancel()
		if err != nil {
			// Unacknowledged entries stay pending and are handled again:
			// at least once.
			p.redisFailed(began, "XACK failed; the events will be delivered again", err, logkey.Events, len(batch))
		} else {
			p.redisOK(began)
			p.acked.Add(int64(len(batch)))
		}
		for _, id := range batch {
			p.held.Delete(id)
		}
		batch = batch[:0]
	}
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case ids, ok := <-p.acks:
			if !ok {
				flush()
				return
			}
			batch = append(batch, ids...)
			if len(batch) >= 256 {
				flush()
			}
		case <-t.C:
			flush()
		}
	}
}

// heartbeat keeps the events we hold ours: every MinIdle/4 it resets the
// idle time of those idle for MinIdle/2 or more (XCLAIM ... JUSTID), so
// another consumer's reclaim (at MinIdle) never takes an event we still
// hold. An event another consumer took meanwhile is younger than MinIdle/2
// and is not taken back.
func (p *Pool) heartbeat(ctx context.Context) {
	t := time.NewTicker(p.cfg.MinIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ids []string
		p.held.Range(func(k, _ any) bool {
			ids = append(ids, k.(string))
			return true
		})
		for start := 0; start < len(ids); start += 500 {
			chunk := ids[start:min(start+500, len(ids))]
			began := time.Now()
			err := p.cfg.Client.XClaimJustID(ctx, &redis.XClaimArgs{Stream: p.cfg.Keys.Events(), Group: p.cfg.Group,
				Consumer: p.cfg.Consumer, MinIdle: p.cfg.MinIdle / 2, Messages: chunk}).Err()
			switch {
			case err == nil:
				p.redisOK(began)
			case ctx.Err() == nil:
				p.redisFailed(began, "cannot refresh the idle time of held events", err)
			}
		}
	}
}

// reclaimLoop takes over the pending events of consumers idle for MinIdle,
// every MinIdle/2, walking the whole pending list with XAUTOCLAIM and
// carrying its cursor forward.
func (p *Pool) reclaimLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.MinIdle / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.reclaimPass(ctx)
		p.removeDeadConsumers(ctx)
	}
}

// removeDeadConsumers removes the group's other consumers that have nothing
// pending and have been idle DeadConsumerIdle: processes that were killed
// before they could remove themselves (reclaims took their events).
func (p *Pool) removeDeadConsumers(ctx context.Context) {
	cs, err := p.cfg.Client.XInfoConsumers(ctx, p.cfg.Keys.Events(), p.cfg.Group).Result()
	if err != nil {
		return
	}
	for _, c := range cs {
		if c.Name == p.cfg.Consumer || c.Pending > 0 || c.Idle < p.cfg.DeadConsumerIdle {
			continue
		}
		n, err := removeIdleConsumer.Run(ctx, p.cfg.Client, []string{p.cfg.Keys.Events()}, p.cfg.Group, c.Name, p.cfg.DeadConsumerIdle.Milliseconds()).Int()
		if err == nil && n == 1 {
			p.removed.Add(1)
			p.log.Info("removed a dead consumer from the group", logkey.DeadConsumer, c.Name, logkey.Idle, c.Idle.Round(time.Second).String())
		}
	}
}

func (p *Pool) reclaimPass(ctx context.Context) {
	cursor := "0-0"
	for ctx.Err() == nil {
		n := p.takeSlots(ctx)
		if n == 0 {
			return
		}
		began := time.Now()
		msgs, next, deleted, err := p.cfg.Client.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{Stream: p.cfg.Keys.Events(),
			Group: p.cfg.Group, Consumer: p.cfg.Consumer, MinIdle: p.cfg.MinIdle, Start: cursor, Count: int64(n)}).Result()
		if err != nil {
			p.giveSlots(n)
			if ctx.Err() == nil {
				p.redisFailed(began, "reclaim failed", err)
			}
			return
		}
		p.redisOK(began)
		p.giveSlots(n - len(msgs))
		if len(msgs) > 0 {
			if !p.advance(ctx, msgs) {
				p.giveSlots(len(msgs)) // claimed, not handed on: reclaimed again later
				return
			}
			p.reclaimed.Add(int64(len(msgs)))
			p.dispatch(msgs, p.deliveryCounts(ctx, msgs))
		}
		if len(deleted) > 0 {
			// Pending entries whose payload is gone (Redis 7 reports them
			// and drops them from the pending list): their changes never
			// reached the sink.
			st, g, _, err := redisx.ReadGroup(ctx, p.cfg.Client, p.cfg.Keys.Events(), p.cfg.Group)
			if err == nil {
				g.LostPending, g.FirstLostPending = max(g.LostPending, 0)+int64(len(deleted)), deleted[0]
				p.gone.Add(int64(len(deleted)))
				p.historyLost(&redisx.HistoryLostError{Feed: p.cfg.Keys.Feed(), Stream: p.cfg.Keys.Events(), State: st, Group: g})
			} else {
				p.historyLost(fmt.Errorf("%d pending entries are gone from the stream (%w; the oldest %s): "+redisx.BootstrapAdvice,
					len(deleted), redisx.ErrHistoryLost, deleted[0]))
			}
			return
		}
		if next == "0-0" || next == "" {
			return
		}
		cursor = next
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
