package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// ErrClosed is returned by the handler of a closed sink. It is not
// permanent: the event stays pending and is delivered again.
var ErrClosed = errors.New("sink is closed")

// Sink is what every sink in this package offers.
type Sink interface {
	// Handler applies one event; it may be called concurrently.
	Handler() redisx.Handler
	// Close stops the sink; see the package doc.
	Close(ctx context.Context) error
}

// jsonLine is the event's JSON form (redisx.Event.MarshalJSON) and a
// newline. An event that cannot be rendered (its source is not JSON) never
// will be: the error is permanent. MarshalJSON is called directly:
// json.Marshal would re-compact its output with HTML escaping, turning a
// source's '<', '>', '&', U+2028 into \u003c and the like.
func jsonLine(e redisx.Event) ([]byte, error) {
	b, err := e.MarshalJSON()
	if err != nil {
		return nil, redisx.Permanent(fmt.Errorf("render %s event %s: %w", e.Op, e.StreamID, err))
	}
	return append(b, '\n'), nil
}

// handlerGate counts handlers in flight so Close can wait for them.
type handlerGate struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// enter registers a handler call; false once the gate is closed.
func (g *handlerGate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *handlerGate) leave() { g.wg.Done() }

// close refuses new calls and waits for those in flight or for ctx.
func (g *handlerGate) close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for handlers in flight: %w", ctx.Err())
	}
}
