package sinktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Writer is an io.Writer to give a sink that writes to one (stdout): it
// keeps what was written, blocks in Write while its Gate hangs, and notes
// a Close (a sink never closes a writer passed in). It is safe for
// concurrent use.
type Writer struct {
	Gate Gate

	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

// Write appends p once the Gate lets it through; after Close it fails.
func (w *Writer) Write(p []byte) (int, error) {
	_ = w.Gate.Pass(context.Background())
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, errors.New("sinktest.Writer: write after Close")
	}
	return w.buf.Write(p)
}

// Close notes that the writer was closed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

// Delivered parses what was written as JSON lines (ParseLines); for
// Env.Delivered.
func (w *Writer) Delivered(context.Context) ([]redisx.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return ParseLines(w.buf.Bytes())
}

// CheckOpen returns an error if the writer was closed; for
// Env.ClientsOpen.
func (w *Writer) CheckOpen(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("the io.Writer passed to the sink was closed")
	}
	return nil
}

// ParseLines parses JSON lines, each one event in its JSON form
// (redisx.Event.MarshalJSON), as the stdout and file sinks write them. A
// line that is not one whole event (cut, or interleaved with another) is
// an error naming it, and so is a last line without its newline.
func ParseLines(b []byte) ([]redisx.Event, error) {
	var out []redisx.Event
	for n := 1; len(b) > 0; n++ {
		line, rest, ok := bytes.Cut(b, []byte("\n"))
		if !ok {
			return out, fmt.Errorf("line %d has no newline: %q", n, line)
		}
		var e redisx.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return out, fmt.Errorf("line %d is not one event: %v: %q", n, err, line)
		}
		out = append(out, e)
		b = rest
	}
	return out, nil
}
