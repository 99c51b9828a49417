package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/es-changefeed/es-changefeed/es"
)

// DefaultStatsWindow is how long a round's shard-stats request waits for
// the other indices' rounds to join it (Config.StatsWindow).
const DefaultStatsWindow = 5 * time.Millisecond

// statsBatcher joins the shard-stats reads of the indices' rounds into one
// GET /<i1,i2,…>/_stats/get request: idle rounds of every followed index
// wake at the same instants (nextTick), so one request per poll serves them
// all instead of one per index. A batch that fails (an index missing or
// closed, a failed shard) is read again index by index, so each round sees
// exactly the answer it would have got alone.
type statsBatcher struct {
	r      *Relay
	mu     sync.Mutex
	open   *statsBatch // the batch waiting for its window to pass
	epoch  time.Time   // the ticks are epoch + k × PollInterval
	window time.Duration
	began  atomic.Int64 // the last tick counted by roundOnTick, +1
}

type statsBatch struct {
	names []string
	seen  map[string]bool
	done  chan struct{}
	ec    *es.Client // the node that answered (the rounds pin to it)
	stats map[string]es.IndexStats
	err   error
}

// stats returns the index's shard stats and the client, pinned to one
// node, that read them: the round sends its refresh, searches and settle
// checks to the same node.
func (b *statsBatcher) stats(ctx context.Context, name string) (map[string]es.IndexStats, *es.Client, error) {
	if b.window <= 0 {
		ec := b.r.cfg.ES.Pin()
		st, err := ec.Stats(ctx, []string{name})
		return st, ec, err
	}
	b.mu.Lock()
	bt := b.open
	if bt == nil {
		bt = &statsBatch{seen: map[string]bool{}, done: make(chan struct{})}
		b.open = bt
		time.AfterFunc(b.window, func() { b.send(bt) })
	}
	if !bt.seen[name] {
		bt.seen[name] = true
		bt.names = append(bt.names, name)
	}
	b.mu.Unlock()
	select {
	case <-bt.done:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if st, ok := bt.stats[name]; ok && bt.err == nil {
		return map[string]es.IndexStats{name: st}, bt.ec, nil
	}
	// The batch failed, or does not list this index: ask alone, for the
	// answer (and the error) this index would have had.
	ec := b.r.cfg.ES.Pin()
	st, err := ec.Stats(ctx, []string{name})
	return st, ec, err
}

// send reads the batch's stats with one request for the relay's target
// expressions (every index they match, whatever their number: a list of
// 1,000 names would not fit a URL, which engines cap at 4 KB), from one
// node. Indices it does not list, and every index if it fails, ask alone.
func (b *statsBatcher) send(bt *statsBatch) {
	b.mu.Lock()
	if b.open == bt {
		b.open = nil
	}
	b.mu.Unlock()
	defer close(bt.done)
	ctx, cancel := context.WithTimeout(context.Background(), es.DefaultRequestTimeout)
	defer cancel()
	bt.ec = b.r.cfg.ES.Pin()
	if len(bt.names) == 1 {
		bt.stats, bt.err = bt.ec.Stats(ctx, bt.names)
		return
	}
	bt.stats, bt.err = bt.ec.StatsMatching(ctx, b.r.cfg.Targets, b.r.cfg.Hidden)
}

// nextTick waits for the next poll tick shared by every index of the relay
// (epoch + k × PollInterval): idle rounds then ask for their stats at the
// same moment, and the batcher joins them. It reports false if ctx ended.
func (b *statsBatcher) nextTick(ctx context.Context) bool {
	p := b.r.cfg.PollInterval
	d := p - time.Since(b.epoch)%p
	if d < time.Millisecond {
		d += p // a round ending just before a tick waits for the next one
	}
	return sleep(ctx, d)
}

// roundOnTick counts the tick now in escf_poll_ticks_total when it is the
// first round to begin on it (a round that nextTick woke for).
func (b *statsBatcher) roundOnTick() {
	k := b.tick() + 1
	for {
		last := b.began.Load()
		if k <= last {
			return
		}
		if b.began.CompareAndSwap(last, k) {
			b.r.m.ticks.Inc()
			return
		}
	}
}

// tick is the number of the poll tick now (ticks are epoch + k ×
// PollInterval): a loop forces at most one refresh of its index per tick.
func (b *statsBatcher) tick() int64 {
	return int64(time.Since(b.epoch) / b.r.cfg.PollInterval)
}

// refreshBatcher joins the refreshes of the rounds that read their stats
// from the same node (one statsBatch) into one POST /<i1,i2,…>/_refresh,
// chunked by URL length: the indices whose global checkpoint moved in a
// poll cost one refresh request between them. A batch that fails is sent
// again index by index, so each round sees the answer it would have got
// alone.
type refreshBatcher struct {
	mu     sync.Mutex
	open   map[*es.Client]*refreshBatch
	window time.Duration
}

type refreshBatch struct {
	names []string
	done  chan struct{}
	err   error
}

// refresh refreshes index name through ec, joined with the other rounds
// refreshing through ec within the window.
func (b *refreshBatcher) refresh(ctx context.Context, ec *es.Client, name string) error {
	if b.window <= 0 {
		return ec.Refresh(ctx, name)
	}
	b.mu.Lock()
	if b.open == nil {
		b.open = map[*es.Client]*refreshBatch{}
	}
	bt := b.open[ec]
	if bt == nil {
		bt = &refreshBatch{done: make(chan struct{})}
		b.open[ec] = bt
		time.AfterFunc(b.window, func() { b.send(ec, bt) })
	}
	bt.names = append(bt.names, name)
	b.mu.Unlock()
	select {
	case <-bt.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if bt.err == nil {
		return nil
	}
	if len(bt.names) == 1 {
		return bt.err
	}
	return ec.Refresh(ctx, name)
}

func (b *refreshBatcher) send(ec *es.Client, bt *refreshBatch) {
	b.mu.Lock()
	if b.open[ec] == bt {
		delete(b.open, ec)
	}
	names := bt.names
	b.mu.Unlock()
	defer close(bt.done)
	ctx, cancel := context.WithTimeout(context.Background(), es.DefaultRequestTimeout)
	defer cancel()
	bt.err = ec.RefreshAll(ctx, names)
}
