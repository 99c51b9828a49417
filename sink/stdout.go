package sink

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// StdoutConfig configures a Stdout sink.
type StdoutConfig struct {
	// Writer receives the lines. Default os.Stdout. The sink never closes
	// it.
	Writer io.Writer
}

// Validate names the first bad field. Every StdoutConfig is valid.
func (c StdoutConfig) Validate() error { return nil }

// Stdout writes each event as one JSON line, in the form of
// redisx.Event.MarshalJSON (seq_no always present, 0 included):
//
//	{"op":"upsert","index":"orders","index_uuid":"…","shard":1,"id":"1","seq_no":2,"primary_term":1,"version":2,"source":{…}}
//
// Each line is written with one Write call under a lock, so lines of
// concurrent handlers never interleave. The handler returns once Write
// returned; it does not sync (wrap an *os.File in a File sink for that).
type Stdout struct {
	w    io.Writer
	mu   sync.Mutex
	gate handlerGate
}

// NewStdout returns a Stdout sink.
func NewStdout(cfg StdoutConfig) (*Stdout, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Writer == nil {
		cfg.Writer = os.Stdout
	}
	return &Stdout{w: cfg.Writer}, nil
}

// Handler writes the event's line. A write error is returned (retryable).
func (s *Stdout) Handler() redisx.Handler {
	return func(ctx context.Context, e redisx.Event) error {
		if !s.gate.enter() {
			return ErrClosed
		}
		defer s.gate.leave()
		line, err := jsonLine(e)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, err := s.w.Write(line); err != nil {
			return fmt.Errorf("stdout sink: write %s event %s: %w", e.Op, e.StreamID, err)
		}
		return nil
	}
}

// Close waits for handlers in flight; later handler calls return
// ErrClosed. It does not close the Writer.
func (s *Stdout) Close(ctx context.Context) error { return s.gate.close(ctx) }
