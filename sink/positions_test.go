package sink_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// positionsStore opens a sink's store of applied positions; open again
// must reach the same store (a consumer started again).
type positionsStore struct {
	name string
	open func(tb testing.TB) func(tb testing.TB) redisx.Positions
}

// TestPositions_Contract runs the same cases on every sink that records
// its applied positions (redisx.Positions): a recorded position only goes
// up, survives a new sink on the same store, goes down only by Reset, and
// a lead below one recorded earlier is a *redisx.BehindError that still
// records the new position.
func TestPositions_Contract(t *testing.T) {
	stores := []positionsStore{
		{name: "redis", open: func(tb testing.TB) func(tb testing.TB) redisx.Positions {
			srv := redistest.Start(tb)
			return func(tb testing.TB) redisx.Positions {
				return newRedisSink(tb, srv.Client(tb), sink.RedisConfig{})
			}
		}},
		{name: "bulk", open: func(tb testing.TB) func(tb testing.TB) redisx.Positions {
			target, err := esemu.New(esemu.Config{})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { target.Close() })
			return func(tb testing.TB) redisx.Positions {
				client, err := es.New(es.Config{URLs: []string{target.URL()}})
				if err != nil {
					tb.Fatal(err)
				}
				return newBulkEnvFor(tb, target, client, nil).sink
			}
		}},
		{name: "file", open: func(tb testing.TB) func(tb testing.TB) redisx.Positions {
			path := filepath.Join(tb.TempDir(), "events.jsonl")
			return func(tb testing.TB) redisx.Positions {
				s, err := sink.NewFile(sink.FileConfig{Path: path})
				if err != nil {
					tb.Fatal(err)
				}
				tb.Cleanup(func() { s.Close(context.Background()) })
				return s
			}
		}},
	}
	ctx := context.Background()
	const stream, group = "escf:{f}:events", "g"
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			open := st.open(t)
			s := open(t)
			applied := func(s redisx.Positions) redisx.Position {
				t.Helper()
				p, err := s.Applied(ctx, stream, group)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			if got := applied(s); got != (redisx.Position{}) {
				t.Fatalf("a new store holds %+v, want nothing", got)
			}
			p1 := redisx.Position{Lead: "5000-0", Low: "4000-3"}
			if err := s.Advance(ctx, stream, group, p1, ""); err != nil {
				t.Fatal(err)
			}
			if err := s.Advance(ctx, stream, group, redisx.Position{Lead: "4500-0", Low: "100-0"}, "5000-0"); err != nil {
				t.Fatalf("a lower position, since what the store holds: %v, want nil", err)
			}
			if got := applied(open(t)); got != p1 {
				t.Fatalf("a new sink on the store reads %+v, want %+v (never lowered)", got, p1)
			}
			if err := s.Advance(ctx, stream, "other", redisx.Position{Lead: "1-0"}, ""); err != nil {
				t.Fatal(err)
			}
			low := redisx.Position{Lead: "2000-0", Low: "1000-0"}
			if err := s.Reset(ctx, stream, group, low); err != nil {
				t.Fatal(err)
			}
			if got := applied(s); got != low {
				t.Fatalf("after Reset: %+v, want %+v", got, low)
			}
			err := s.Advance(ctx, stream, group, redisx.Position{Lead: "6000-0", Low: "5000-0"}, "5000-0")
			var be *redisx.BehindError
			if !errors.As(err, &be) || be.Recorded != low {
				t.Fatalf("Advance since 5000-0 over a store holding %+v: %v; want a *BehindError holding it", low, err)
			}
			if got, want := applied(s), (redisx.Position{Lead: "6000-0", Low: "5000-0"}); got != want {
				t.Fatalf("after the BehindError: %+v, want %+v (recorded anyway)", got, want)
			}
			if got := applied(open(t)); got.Lead != "6000-0" {
				t.Fatalf("a new sink reads %+v, want lead 6000-0", got)
			}
		})
	}
}
