package sink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/sink/sinktest"
)

// sinkUpsert is an upsert of document id of index "orders" (uuid "U1",
// shard 0) at seq, with source {"seq":<seq>}.
func sinkUpsert(id string, seq int64) redisx.Event {
	return redisx.Event{Op: redisx.OpUpsert, Index: "orders", IndexUUID: "U1", Shard: 0, ID: id, SeqNo: seq,
		PrimaryTerm: 1, Version: seq + 1, Source: json.RawMessage(`{"seq":` + strconv.FormatInt(seq, 10) + `}`)}
}

// sinkDelete is a delete of document id stamped seq.
func sinkDelete(id string, seq int64) redisx.Event {
	return redisx.Event{Op: redisx.OpDelete, Index: "orders", IndexUUID: "U1", Shard: 0, ID: id, SeqNo: seq}
}

func TestStdout_Handler(t *testing.T) {
	tests := []struct {
		name string
		e    redisx.Event
		want string
	}{
		{
			name: "the seed line",
			e: redisx.Event{Op: redisx.OpUpsert, Index: "escf-cli", IndexUUID: "BZfHMdwmRv-iskXKFEMGgA", Shard: 1, ID: "1",
				SeqNo: 2, PrimaryTerm: 1, Version: 2, Source: json.RawMessage(`{"title": "edited"}`)},
			want: `{"op":"upsert","index":"escf-cli","index_uuid":"BZfHMdwmRv-iskXKFEMGgA","shard":1,"id":"1","seq_no":2,"primary_term":1,"version":2,"source":{"title":"edited"}}`,
		},
		{
			name: "seq_no 0 is kept",
			e:    sinkUpsert("a", 0),
			want: `{"op":"upsert","index":"orders","index_uuid":"U1","shard":0,"id":"a","seq_no":0,"primary_term":1,"version":1,"source":{"seq":0}}`,
		},
		{
			name: "delete",
			e:    sinkDelete("a", 0),
			want: `{"op":"delete","index":"orders","index_uuid":"U1","shard":0,"id":"a","seq_no":0}`,
		},
		{
			name: "routing and target",
			e: redisx.Event{Op: redisx.OpUpsert, Index: "logs-1", IndexUUID: "U", Shard: 2, ID: "x", Routing: "r", SeqNo: 5,
				PrimaryTerm: 1, Version: 1, Source: json.RawMessage(`{}`), Target: "logs-*"},
			want: `{"op":"upsert","index":"logs-1","index_uuid":"U","shard":2,"id":"x","routing":"r","seq_no":5,"primary_term":1,"version":1,"source":{},"target":"logs-*"}`,
		},
		{
			name: "snapshot_end",
			e:    redisx.Event{Op: redisx.OpSnapshotEnd, Target: "orders", Counts: map[string]int64{"orders": 2}},
			want: `{"op":"snapshot_end","target":"orders","counts":{"orders":2}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			s, err := sink.NewStdout(sink.StdoutConfig{Writer: &buf})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Handler()(context.Background(), tt.e); err != nil {
				t.Fatal(err)
			}
			if got, want := buf.String(), tt.want+"\n"; got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// stdoutWrites records each Write call.
type stdoutWrites struct {
	mu     sync.Mutex
	writes []string
}

func (w *stdoutWrites) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// TestStdout_Contract runs the sinks' contract (sinktest) on Stdout.
func TestStdout_Contract(t *testing.T) {
	sinktest.Run(t, func(tb testing.TB) sinktest.Env {
		w := &sinktest.Writer{}
		s, err := sink.NewStdout(sink.StdoutConfig{Writer: w})
		if err != nil {
			tb.Fatal(err)
		}
		return sinktest.Env{Sink: s, Delivered: w.Delivered, Gate: &w.Gate, ClientsOpen: w.CheckOpen}
	}, sinktest.Features{Appends: true, ClientsPassedIn: true, CloseAborts: true})
}

// TestStdout_OneWritePerLine checks that concurrent handlers write each
// line with one Write call (a pipe reader never sees half a line).
func TestStdout_OneWritePerLine(t *testing.T) {
	w := &stdoutWrites{}
	s, err := sink.NewStdout(sink.StdoutConfig{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := h(context.Background(), sinkUpsert(strconv.Itoa(i), int64(i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := len(w.writes), n; got != want {
		t.Fatalf("%d writes, want %d", got, want)
	}
	for _, line := range w.writes {
		if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
			t.Fatalf("a write is not exactly one line: %q", line)
		}
	}
}

func TestStdout_BadSourceIsPermanent(t *testing.T) {
	s, err := sink.NewStdout(sink.StdoutConfig{Writer: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	e := sinkUpsert("a", 1)
	e.Source = json.RawMessage(`{not json`)
	if err := s.Handler()(context.Background(), e); !redisx.IsPermanent(err) {
		t.Errorf("err = %v, want permanent", err)
	}
}
