package redisx

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
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
)

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Client is the feed's Redis. Required.
	Client redis.UniversalClient
	// Keys names the feed's stream and dead-letter stream. Required.
	Keys Keys
	// Group is the consumer group. Required.
	Group string
	// Consumer is this consumer's name in the group. Default "<host>-<pid>".
	Consumer string
	// Workers is the number of lanes: events of one document always go to
	// the same lane, so they are handled one at a time, in order. Default 8.
	Workers int
	// Start is where a group created by the pool starts: "0" (the whole
	// stream) or "$" (new events only). Default "0".
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
	// doubles each time, up to MaxRetryBackoff. Defaults 100ms and 5s.
	RetryBackoff, MaxRetryBackoff time.Duration
	// ShutdownTimeout bounds how long events being handled may take to
	// finish once Run's context ends. Default 30s.
	ShutdownTimeout time.Duration
	// Logger receives the pool's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics registers the pool's collectors (escf_consumer_events_total,
	// escf_handler_duration_seconds). Default nil: not registered.
	Metrics prometheus.Registerer
}

// Validate names the first bad field.
func (c PoolConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("pool config: Client is nil")
	case c.Keys.Feed() == "":
		return errors.New("pool config: Keys is empty (use NewKeys)")
	case c.Group == "":
		return errors.New("pool config: Group is empty: name the consumer group (--group)")
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
	case c.Block < 0 || c.RetryBackoff < 0 || c.MaxRetryBackoff < 0 || c.ShutdownTimeout < 0:
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
		c.Start = "0"
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
	if c.Logger == nil {
		c.Logger = slog.Default()
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
	// Gone is pending entries found trimmed from the stream (acknowledged,
	// not handled).
	Gone int64
}

// Pool is a worker pool in a Redis consumer group. Run it once.
type Pool struct {
	cfg PoolConfig
	log *slog.Logger
	h   Handler

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

	read, handled, failed, acked, dead, reclaimed, gone atomic.Int64
	metrics                                             *poolCollector

	outage outage
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
	args = append(args, "error", err.Error())
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
	p.log.Info("Redis answers again; recovered", "failing_for", lasted.Round(time.Millisecond).String(), "failed_calls", calls)
}

// job is one event in a lane.
type job struct {
	msg        redis.XMessage
	ev         Event
	bad        error // the entry could not be decoded
	deliveries int64 // Redis's delivery count when handed to the lane
}

// NewPool returns a pool.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Pool{cfg: cfg, log: cfg.Logger.With("group", cfg.Group, "consumer", cfg.Consumer)}
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
		DeadLettered: p.dead.Load(), Reclaimed: p.reclaimed.Load(), Gone: p.gone.Load()}
}

// Run consumes the feed with h until ctx ends. It creates the group if
// missing, first handles this consumer's own pending events (a restart after
// a crash), then new ones, and reclaims the events of consumers idle for
// MinIdle. When ctx ends it stops reading, lets the events being handled
// finish (within ShutdownTimeout), acknowledges them and returns nil; events
// read but not started stay pending for this consumer's next start (or
// another consumer's reclaim). Redis errors are retried with backoff; an
// outage is logged once, and its end once.
func (p *Pool) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("pool: nil Handler")
	}
	p.h = h
	if err := p.ensureGroup(ctx); err != nil {
		return err
	}
	p.slots = make(chan struct{}, p.cfg.Prefetch)
	for i := 0; i < p.cfg.Prefetch; i++ {
		p.slots <- struct{}{}
	}
	p.acks = make(chan []string, p.cfg.Prefetch)
	// Handlers run on a context that outlives ctx by ShutdownTimeout.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
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
	bg, stopBG := context.WithCancel(ctx)
	helpers.Add(2)
	go func() { defer helpers.Done(); p.heartbeat(bg) }()
	go func() { defer helpers.Done(); p.reclaimLoop(bg) }()

	p.readLoop(ctx)

	// Shutdown: no more reading or reclaiming; lanes finish what they hold
	// (queued jobs not started are released), then acks are flushed.
	p.stopped.Store(true)
	stopBG()
	helpers.Wait()
	for _, ch := range p.lanes {
		close(ch)
	}
	finished := make(chan struct{})
	go func() { lanes.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(p.cfg.ShutdownTimeout):
		p.log.Warn("shutdown timeout: canceling handlers still running", "timeout", p.cfg.ShutdownTimeout)
		hcancel()
		<-finished
	}
	close(p.acks)
	<-ackDone
	st := p.Stats()
	p.log.Info("consumer stopped", "handled", st.Handled, "failed_attempts", st.Failed, "dead_lettered", st.DeadLettered, "reclaimed", st.Reclaimed)
	return nil
}

// ensureGroup creates the group (and the stream) if missing.
func (p *Pool) ensureGroup(ctx context.Context) error {
	err := p.cfg.Client.XGroupCreateMkStream(ctx, p.cfg.Keys.Events(), p.cfg.Group, p.cfg.Start).Err()
	if err == nil {
		p.log.Info("created consumer group", "stream", p.cfg.Keys.Events(), "start", p.cfg.Start)
		return nil
	}
	if redis.HasErrorPrefix(err, "BUSYGROUP") {
		return nil
	}
	return fmt.Errorf("create consumer group %s on %s: %w", p.cfg.Group, p.cfg.Keys.Events(), err)
}

// readLoop reads this consumer's own pending entries, then new ones, until
// ctx ends. It reads only as many entries as there are free slots.
func (p *Pool) readLoop(ctx context.Context) {
	own := "0" // first: our own pending entries, from the start
	bo := backoffState{min: p.cfg.RetryBackoff, max: p.cfg.MaxRetryBackoff}
	for ctx.Err() == nil {
		n := p.takeSlots(ctx)
		if n == 0 {
			return
		}
		start := ">"
		if own != "" {
			start = own
		}
		began := time.Now()
		res, err := p.readGroup(ctx, start, n)
		if ctx.Err() != nil {
			return // what an abandoned read returns stays pending for our next start
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
				_ = p.ensureGroup(ctx)
			}
			d := bo.next()
			p.redisFailed(began, "read failed; retrying", err, "retry_in", d.String())
			sleepCtx(ctx, d)
			continue
		}
		bo.reset()
		msgs := res[0].Messages
		p.giveSlots(n - len(msgs))
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

// readGroup runs one XREADGROUP; a blocking read is abandoned when ctx ends
// (go-redis does not interrupt it), so shutdown does not wait for Block.
func (p *Pool) readGroup(ctx context.Context, start string, n int) ([]redis.XStream, error) {
	type result struct {
		res []redis.XStream
		err error
	}
	ch := make(chan result, 1)
	go func() {
		res, err := p.cfg.Client.XReadGroup(context.WithoutCancel(ctx), &redis.XReadGroupArgs{
			Group: p.cfg.Group, Consumer: p.cfg.Consumer, Streams: []string{p.cfg.Keys.Events(), start},
			Count: int64(n), Block: p.cfg.Block,
		}).Result()
		ch <- result{res, err}
	}()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
		p.held.Store(m.ID, struct{}{})
		p.busy.add()
		j := &job{msg: m, deliveries: 1}
		if deliveries != nil {
			j.deliveries = deliveries[m.ID]
		}
		if m.Values == nil {
			// Trimmed from the stream while pending: nothing to handle.
			p.gone.Add(1)
			p.acks <- []string{m.ID}
			p.busy.done(1)
			p.giveSlots(1)
			continue
		}
		j.ev, j.bad = ParseEvent(m)
		if j.bad != nil || !j.ev.Op.document() {
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
func laneOf(e Event, n int) int {
	h := fnv.New32a()
	h.Write([]byte(e.IndexUUID))
	h.Write([]byte{'/'})
	h.Write([]byte(strconv.Itoa(e.Shard)))
	h.Write([]byte{'/'})
	h.Write([]byte(e.ID))
	return int(h.Sum32() % uint32(n))
}

// lane handles its jobs in order. After Run's context ends it finishes the
// job it is on and releases the queued ones. Acks and slots are returned
// per slice.
func (p *Pool) lane(ctx, hctx context.Context, ch chan []*job) {
	for js := range ch {
		var acked []string
		for _, j := range js {
			if ctx.Err() != nil {
				p.held.Delete(j.msg.ID) // not started: stays pending for a later start
				continue
			}
			if p.handle(ctx, hctx, j) {
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
	backoff := p.cfg.RetryBackoff
	for {
		start := time.Now()
		err := p.h(hctx, j.ev)
		p.metrics.latency.Observe(time.Since(start).Seconds())
		if err == nil {
			p.handled.Add(1)
			return true
		}
		p.failed.Add(1)
		if IsPermanent(err) || j.deliveries >= p.cfg.MaxDeliveries {
			p.deadLetter(hctx, j, err)
			return false
		}
		select {
		case <-ctx.Done():
			p.held.Delete(j.msg.ID) // retried by the next start or another consumer
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, p.cfg.MaxRetryBackoff)
		began := time.Now()
		claimed, cerr := p.cfg.Client.XClaim(hctx, &redis.XClaimArgs{Stream: p.cfg.Keys.Events(), Group: p.cfg.Group,
			Consumer: p.cfg.Consumer, MinIdle: 0, Messages: []string{j.msg.ID}}).Result()
		switch {
		case cerr != nil:
			p.redisFailed(began, "cannot count a retry; the event stays pending", cerr, "id", j.msg.ID)
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
		p.redisFailed(began, "cannot dead-letter the event; it stays pending", err, "id", j.msg.ID)
		return
	}
	p.redisOK(began)
	p.dead.Add(1)
	p.log.Warn("event dead-lettered", "id", j.msg.ID, "deliveries", j.deliveries, "error", cause.Error(), "dead_letters", p.cfg.Keys.Dead())
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
			p.redisFailed(began, "XACK failed; the events will be delivered again", err, "events", len(batch))
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
			p.reclaimed.Add(int64(len(msgs)))
			p.dispatch(msgs, p.deliveryCounts(ctx, msgs))
		}
		if len(deleted) > 0 {
			// Entries trimmed while pending (Redis 7 reports them): they
			// cannot be handled; acknowledge them so they leave the PEL.
			p.gone.Add(int64(len(deleted)))
			_ = p.cfg.Client.XAck(ctx, p.cfg.Keys.Events(), p.cfg.Group, deleted...).Err()
		}
		if next == "0-0" || next == "" {
			return
		}
		cursor = next
	}
}

// backoffState is a capped exponential backoff.
type backoffState struct {
	min, max, cur time.Duration
}

func (b *backoffState) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoffState) reset() { b.cur = 0 }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
