package sinktest

import (
	"context"
	"sync"
)

// Gate makes a sink's target hang: the target's code calls Pass before it
// answers, and Pass blocks from Hang until Release. The zero Gate is open.
// It is safe for concurrent use.
type Gate struct {
	mu       sync.Mutex
	hung     chan struct{} // not nil while hung; closed by Release
	stuck    chan struct{} // closed by the first Pass that blocks since Hang
	signaled bool
}

// Hang makes later calls to Pass block until Release.
func (g *Gate) Hang() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hung == nil {
		g.hung, g.stuck, g.signaled = make(chan struct{}), make(chan struct{}), false
	}
}

// Release lets the calls blocked in Pass, and later ones, through.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hung != nil {
		close(g.hung)
		g.hung = nil
	}
}

// Stuck is closed once a call blocks in Pass after the last Hang (never,
// when the Gate was never hung).
func (g *Gate) Stuck() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stuck == nil {
		g.stuck = make(chan struct{})
	}
	return g.stuck
}

// Pass returns nil at once unless the Gate hangs; then it blocks until
// Release (nil) or until ctx ends (ctx's error).
func (g *Gate) Pass(ctx context.Context) error {
	g.mu.Lock()
	hung := g.hung
	if hung != nil && !g.signaled {
		close(g.stuck)
		g.signaled = true
	}
	g.mu.Unlock()
	if hung == nil {
		return nil
	}
	select {
	case <-hung:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
