package sink_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/sink/sinktest"
)

// TestFile_Contract runs the sinks' contract (sinktest) on File (its other
// tests, in file_test.go, are inside the package). Close cannot give up on
// an fsync that hangs, so CloseAborts is not claimed.
func TestFile_Contract(t *testing.T) {
	sinktest.Run(t, func(tb testing.TB) sinktest.Env {
		path := filepath.Join(tb.TempDir(), "events.jsonl")
		open := func(tb testing.TB) sink.Sink {
			s, err := sink.NewFile(sink.FileConfig{Path: path})
			if err != nil {
				tb.Fatal(err)
			}
			return s
		}
		delivered := func(context.Context) ([]redisx.Event, error) {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			return sinktest.ParseLines(b)
		}
		return sinktest.Env{Sink: open(tb), Delivered: delivered, Reopen: open}
	}, sinktest.Features{Appends: true, Positions: true})
}
