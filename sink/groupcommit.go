package sink

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// groupCommit funnels items from many handlers into one goroutine that
// flushes them in batches: it takes everything pending (up to maxBatch),
// flushes it once, and hands the flush's result to every handler of the
// batch. Items that arrive during a flush make the next batch, so the
// number of flushes adapts to their cost. With maxWait > 0 a batch that is
// not full waits up to maxWait for more items before it is flushed.
type groupCommit[T any] struct {
	maxBatch int           // 0: no limit
	maxWait  time.Duration // 0: flush at once
	flush    func(ctx context.Context, batch []T) error

	ctx    context.Context // passed to flush; canceled when Close gives up
	cancel context.CancelFunc

	mu      sync.Mutex
	pending []gcItem[T]
	closed  bool

	wake chan struct{} // cap 1: something was submitted
	stop chan struct{} // closed by close
	done chan struct{} // closed when run returns
}

type gcItem[T any] struct {
	v    T
	done chan error // cap 1
}

// newGroupCommit starts the flushing goroutine; close stops it.
func newGroupCommit[T any](maxBatch int, maxWait time.Duration, flush func(context.Context, []T) error) *groupCommit[T] {
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupCommit[T]{
		maxBatch: maxBatch, maxWait: maxWait, flush: flush,
		ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go g.run()
	return g
}

// submit queues v and blocks until the batch holding it was flushed (the
// flush's error) or ctx ends (ctx's error; v may still be flushed later).
// After close it returns ErrClosed.
func (g *groupCommit[T]) submit(ctx context.Context, v T) error {
	it := gcItem[T]{v: v, done: make(chan error, 1)}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.pending = append(g.pending, it)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-it.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *groupCommit[T]) run() {
	defer close(g.done)
	for {
		select {
		case <-g.wake:
		case <-g.stop:
		}
		g.linger()
		for {
			batch, closed := g.take()
			if len(batch) == 0 {
				if closed {
					return
				}
				break
			}
			vs := make([]T, len(batch))
			for i, it := range batch {
				vs[i] = it.v
			}
			err := g.flush(g.ctx, vs)
			for _, it := range batch {
				it.done <- err
			}
		}
	}
}

// linger waits, up to maxWait, for a batch to fill.
func (g *groupCommit[T]) linger() {
	if g.maxWait <= 0 {
		return
	}
	t := time.NewTimer(g.maxWait)
	defer t.Stop()
	for {
		g.mu.Lock()
		n, closed := len(g.pending), g.closed
		g.mu.Unlock()
		if n == 0 || closed || (g.maxBatch > 0 && n >= g.maxBatch) {
			return
		}
		select {
		case <-g.wake:
		case <-t.C:
			return
		case <-g.stop:
			return
		}
	}
}

// take removes the next batch from the queue.
func (g *groupCommit[T]) take() (batch []gcItem[T], closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.pending)
	if g.maxBatch > 0 && n > g.maxBatch {
		n = g.maxBatch
	}
	batch = g.pending[:n:n]
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil
	}
	return batch, g.closed
}

// close refuses new items, flushes the pending ones and waits for the
// goroutine. When ctx ends first it cancels the flush's context, waits for
// the goroutine to notice, and returns ctx's error.
func (g *groupCommit[T]) close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		<-g.done
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	close(g.stop)
	select {
	case <-g.done:
		g.cancel()
		return nil
	case <-ctx.Done():
		g.cancel()
		<-g.done
		return fmt.Errorf("flush pending events: %w", ctx.Err())
	}
}
