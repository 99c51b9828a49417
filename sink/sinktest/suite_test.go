package sinktest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/sink/sinktest"
)

// memStore is what a memory sink holds; sinks reopened on it share it.
type memStore struct {
	mu   sync.Mutex
	docs map[sinktest.DocID]memDoc
	log  []redisx.Event // what an appending memory sink delivered
	pos  map[string]redisx.Position
}

type memDoc struct {
	order   int64
	event   redisx.Event
	deleted bool
}

// memClient stands for a client passed in.
type memClient struct{ closed atomic.Bool }

// memSink is a reference sink held in memory, correct unless broken names
// a way to break it (see brokenSinks). It is Ordered (a fence per
// document), or Appends when appends is set.
type memSink struct {
	appends bool
	broken  string
	store   *memStore
	client  *memClient
	gate    *sinktest.Gate

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (s *memSink) Handler() redisx.Handler {
	return func(ctx context.Context, e redisx.Event) error {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			if s.broken == "permanent-closed" {
				return redisx.Permanent(sink.ErrClosed)
			}
			return fmt.Errorf("memory sink: %w", sink.ErrClosed)
		}
		s.wg.Add(1)
		s.mu.Unlock()
		defer s.wg.Done()
		if err := s.gate.Pass(ctx); err != nil {
			return err
		}
		st := s.store
		st.mu.Lock()
		defer st.mu.Unlock()
		if s.appends {
			if s.broken == "dedupes" {
				for _, old := range st.log {
					if old.Op == e.Op && old.ID == e.ID && old.SeqNo == e.SeqNo {
						return nil
					}
				}
			}
			st.log = append(st.log, e)
			return nil
		}
		if e.Op != redisx.OpUpsert && e.Op != redisx.OpDelete {
			return nil
		}
		id := sinktest.DocID{Index: e.Index, IndexUUID: e.IndexUUID, Shard: e.Shard, ID: e.ID}
		order := 2 * e.SeqNo
		if e.Op == redisx.OpDelete {
			order++
		}
		cur, seen := st.docs[id]
		if !seen && e.Op == redisx.OpDelete && s.broken == "unseen-delete-fails" {
			return fmt.Errorf("memory sink: delete %s: no such document", e.ID)
		}
		if seen && order <= cur.order && s.broken != "no-fence" {
			return nil
		}
		st.docs[id] = memDoc{order: order, event: e, deleted: e.Op == redisx.OpDelete}
		return nil
	}
}

func (s *memSink) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.broken == "closes-client" {
		s.client.closed.Store(true)
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	if s.broken == "close-ignores-ctx" {
		<-done
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("memory sink: wait for handlers: %w", ctx.Err())
	}
}

// memFullSink adds the optional interfaces to an Ordered memSink.
type memFullSink struct{ *memSink }

func (s memFullSink) Applied(_ context.Context, stream, group string) (redisx.Position, error) {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	return s.store.pos[stream+"|"+group], nil
}

func (s memFullSink) Advance(_ context.Context, stream, group string, p redisx.Position, since string) error {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	k := stream + "|" + group
	cur := s.store.pos[k]
	if s.broken == "positions-lowered" {
		s.store.pos[k] = p
	} else {
		s.store.pos[k] = redisx.Position{Lead: redisx.MaxID(cur.Lead, p.Lead), Low: redisx.MaxID(cur.Low, p.Low)}
	}
	if since != "" && redisx.LessID(cur.Lead, since) {
		return &redisx.BehindError{Store: "memory", Recorded: cur, Since: since}
	}
	return nil
}

func (s memFullSink) Reset(_ context.Context, stream, group string, p redisx.Position) error {
	s.store.mu.Lock()
	defer s.store.mu.Unlock()
	s.store.pos[stream+"|"+group] = p
	return nil
}

func (s memFullSink) Reconcilable() error { return nil }

func (s memFullSink) Held(_ context.Context, index, uuid string, pageSize int, fn func([]sink.HeldDoc) error) (int64, error) {
	s.store.mu.Lock()
	var all []sink.HeldDoc
	for id, d := range s.store.docs {
		if id.Index == index && id.IndexUUID == uuid && !d.deleted {
			all = append(all, sink.HeldDoc{ID: id.ID, Shard: id.Shard, SeqNo: d.event.SeqNo})
		}
	}
	s.store.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	for i := 0; i < len(all); i += pageSize {
		if err := fn(all[i:min(i+pageSize, len(all))]); err != nil {
			return int64(i), err
		}
	}
	return int64(len(all)), nil
}

// memFactory builds memory sinks, broken as named.
func memFactory(appends bool, broken string) sinktest.Factory {
	return func(tb testing.TB) sinktest.Env {
		store := &memStore{docs: map[sinktest.DocID]memDoc{}, pos: map[string]redisx.Position{}}
		client := &memClient{}
		gate := &sinktest.Gate{}
		open := func(testing.TB) sink.Sink {
			s := &memSink{appends: appends, broken: broken, store: store, client: client, gate: gate}
			if appends {
				return s
			}
			return memFullSink{s}
		}
		env := sinktest.Env{Sink: open(tb), Gate: gate, Reopen: open,
			ClientsOpen: func(context.Context) error {
				if client.closed.Load() {
					return errors.New("the memory client was closed")
				}
				return nil
			},
		}
		if appends {
			env.Reopen = nil
			env.Delivered = func(context.Context) ([]redisx.Event, error) {
				store.mu.Lock()
				defer store.mu.Unlock()
				return append([]redisx.Event(nil), store.log...), nil
			}
		} else {
			env.Holds = func(_ context.Context, d sinktest.DocID) (json.RawMessage, bool, error) {
				store.mu.Lock()
				defer store.mu.Unlock()
				doc, ok := store.docs[d]
				if !ok || doc.deleted {
					return nil, false, nil
				}
				return doc.event.Source, true, nil
			}
		}
		return env
	}
}

var (
	orderedFeatures = sinktest.Features{Ordered: true, Positions: true, Reconciler: true, ClientsPassedIn: true, CloseAborts: true}
	appendsFeatures = sinktest.Features{Appends: true, ClientsPassedIn: true, CloseAborts: true}
)

// TestRun_MemorySinks runs the suite on correct reference sinks: it passes.
func TestRun_MemorySinks(t *testing.T) {
	t.Run("ordered", func(t *testing.T) { sinktest.Run(t, memFactory(false, ""), orderedFeatures) })
	t.Run("appends", func(t *testing.T) { sinktest.Run(t, memFactory(true, ""), appendsFeatures) })
}

// brokenSinks are ways to break the reference sinks, each with the case
// of the suite that must catch it.
var brokenSinks = []struct {
	broken  string
	appends bool
	feat    func(sinktest.Features) sinktest.Features
	catches string
}{
	{broken: "unseen-delete-fails", catches: "DeleteUnseen"},
	{broken: "no-fence", catches: "PerDocumentOrder"},
	{broken: "permanent-closed", catches: "ErrClosed"},
	{broken: "closes-client", catches: "ClientsPassedIn"},
	{broken: "close-ignores-ctx", catches: "CloseDeadline"},
	{broken: "positions-lowered", catches: "Positions"},
	{broken: "dedupes", appends: true, catches: "Redelivery"},
	{broken: "undeclared-positions", catches: "Features",
		feat: func(f sinktest.Features) sinktest.Features { f.Positions = false; return f }},
}

// brokenEnv names the broken sink TestRun_Broken runs the suite on, in
// the test binary TestRun_CatchesBrokenSinks starts again.
const brokenEnv = "SINKTEST_BROKEN"

// TestRun_CatchesBrokenSinks runs the suite on each broken sink, in a
// test process of its own, and checks that the case meant to catch it
// fails.
func TestRun_CatchesBrokenSinks(t *testing.T) {
	for _, b := range brokenSinks {
		t.Run(b.broken, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRun_Broken$", "-test.v")
			cmd.Env = append(os.Environ(), brokenEnv+"="+b.broken)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("the suite passed (or did not run: %v) on the sink broken by %s:\n%s", err, b.broken, out)
			}
			if want := "--- FAIL: TestRun_Broken/" + b.catches + " "; !strings.Contains(string(out), want) {
				t.Errorf("case %s did not fail on the sink broken by %s:\n%s", b.catches, b.broken, out)
			}
		})
	}
}

// TestRun_Broken is TestRun_CatchesBrokenSinks's helper: it runs the suite
// on the broken sink named by $SINKTEST_BROKEN, and fails.
func TestRun_Broken(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("a helper of TestRun_CatchesBrokenSinks (set " + brokenEnv + ")")
	}
	for _, b := range brokenSinks {
		if b.broken != name {
			continue
		}
		feat := orderedFeatures
		if b.appends {
			feat = appendsFeatures
		}
		if b.feat != nil {
			feat = b.feat(feat)
		}
		sinktest.Run(t, memFactory(b.appends, b.broken), feat)
		return
	}
	t.Fatalf("no broken sink %q", name)
}

func TestParseLines(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string
	}{
		{name: "empty", in: ""},
		{name: "two lines", in: `{"op":"delete","index":"i","index_uuid":"u","shard":0,"id":"a","seq_no":1}` + "\n" + `{"op":"snapshot_start"}` + "\n", want: 2},
		{name: "no newline at the end", in: `{"op":"snapshot_start"}`, wantErr: "line 1 has no newline"},
		{name: "two events on one line", in: `{"op":"snapshot_start"}{"op":"snapshot_start"}` + "\n", wantErr: "line 1 is not one event"},
		{name: "a cut line", in: `{"op":"snapshot_start"}` + "\n" + `{"op":"del` + "\n", wantErr: "line 2 is not one event"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sinktest.ParseLines([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("got %d events, %v; want %d", len(got), err, tt.want)
			}
		})
	}
}
