package sinktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
)

// Bounds of the waits in the suite: a sink's call that should return at
// once gets this long before the case fails (slow CI machines, -race).
const (
	waitLimit = 30 * time.Second
	// closeDeadline is the ctx deadline CloseDeadline gives Close, and
	// closeSlack how much longer Close may take to return.
	closeDeadline = 200 * time.Millisecond
	closeSlack    = 5 * time.Second
)

// goneUUID is the index_deleted event's index: one the suite never wrote.
const goneUUID = "SinkTest-gone-uuid"

// Run runs the contract on the sinks f builds, each case on a fresh one
// (see the package doc for the cases).
func Run(t *testing.T, f Factory, feat Features) {
	t.Helper()
	s := suite{f: f, feat: feat}
	t.Run("Features", s.features)
	t.Run("ConcurrentHandlers", s.concurrentHandlers)
	t.Run("PerDocumentOrder", s.perDocumentOrder)
	t.Run("Redelivery", s.redelivery)
	t.Run("DeleteUnseen", s.deleteUnseen)
	t.Run("OtherOps", s.otherOps)
	t.Run("ErrClosed", s.errClosed)
	t.Run("CloseWhileHandling", s.closeWhileHandling)
	t.Run("CloseDeadline", s.closeDeadline)
	t.Run("ClientsPassedIn", s.clientsPassedIn)
	t.Run("Positions", s.positions)
	t.Run("Reconciler", s.reconciler)
}

type suite struct {
	f    Factory
	feat Features
}

// env builds a fresh sink and closes it when the case ends.
func (s suite) env(t *testing.T) Env {
	t.Helper()
	env := s.f(t)
	if env.Sink == nil {
		t.Fatal("the factory returned no Sink")
	}
	closeAtEnd(t, env.Sink)
	return env
}

// closeAtEnd closes sk in t.Cleanup (after the case's own Close: Close
// may be called again).
func closeAtEnd(t *testing.T, sk sink.Sink) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := sk.Close(ctx); err != nil {
			t.Errorf("Close at the end of the case: %v", err)
		}
	})
}

// kind runs the variant of a case the sink's kind calls for: ordered for
// an Ordered sink, appends for an Appends one.
func (s suite) kind(t *testing.T, ordered, appends func()) {
	t.Helper()
	switch {
	case s.feat.Ordered:
		ordered()
	case s.feat.Appends:
		appends()
	default:
		t.Fatal("Features: set Ordered or Appends")
	}
}

func (s suite) features(t *testing.T) {
	feat := s.feat
	if feat.Ordered == feat.Appends {
		t.Fatalf("Features: set exactly one of Ordered (%v) and Appends (%v)", feat.Ordered, feat.Appends)
	}
	env := s.env(t)
	need := []struct {
		on   bool
		flag string
		has  bool
		what string
	}{
		{feat.Ordered, "Ordered", env.Holds != nil, "Env.Holds"},
		{feat.Appends, "Appends", env.Delivered != nil, "Env.Delivered"},
		{feat.Positions, "Positions", env.Reopen != nil, "Env.Reopen"},
		{feat.ClientsPassedIn, "ClientsPassedIn", env.ClientsOpen != nil, "Env.ClientsOpen"},
		{feat.CloseAborts, "CloseAborts", env.Gate != nil, "Env.Gate"},
	}
	for _, n := range need {
		if n.on && !n.has {
			t.Errorf("Features.%s is set but the factory gives no %s", n.flag, n.what)
		}
	}
	_, positions := env.Sink.(redisx.Positions)
	_, reconciler := env.Sink.(sink.Reconciler)
	implements := []struct {
		flag      string
		set, impl bool
		iface     string
	}{
		{"Positions", feat.Positions, positions, "redisx.Positions"},
		{"Reconciler", feat.Reconciler, reconciler, "sink.Reconciler"},
	}
	for _, i := range implements {
		if i.set != i.impl {
			t.Errorf("Features.%s is %v, but the sink (%T) implements %s: %v; they must agree, so the suite runs its contract", i.flag, i.set, env.Sink, i.iface, i.impl)
		}
	}
}

// concurrentHandlers: goroutines call one handler at once with the events
// of several documents, a document's versions spread over goroutines in
// any order.
func (s suite) concurrentHandlers(t *testing.T) {
	env := s.env(t)
	const goroutines, docs, versions = 8, 12, 5
	var events []redisx.Event
	want := map[string]int64{} // Ordered: newest upsert per document, -1 deleted
	for i := range docs {
		id := fmt.Sprintf("c%02d", i)
		if i == 0 {
			id = "c/00 é" // any characters, slashes included
		}
		for seq := int64(1); seq <= versions; seq++ {
			events = append(events, upsert(id, seq))
		}
		want[id] = versions
		if i%3 == 0 {
			events = append(events, del(id, versions)) // orders after the upsert with its seq_no
			want[id] = -1
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	handleConcurrently(t, env.Sink.Handler(), deal(events, goroutines))
	s.kind(t, func() {
		expectHeld(t, env, want)
	}, func() {
		got := delivered(t, env)
		expectEach(t, got, events, 1)
	})
}

// perDocumentOrder: events of one document, handled one after the other.
func (s suite) perDocumentOrder(t *testing.T) {
	env := s.env(t)
	h := env.Sink.Handler()
	s.kind(t, func() {
		steps := []struct {
			e    redisx.Event
			held int64 // the upsert's seq_no the sink holds afterwards, -1 none
			why  string
		}{
			{upsert("o", 5), 5, "the first upsert"},
			{upsert("o", 3), 5, "an older upsert after a newer one"},
			{del("o", 6), -1, "a newer delete"},
			{upsert("o", 4), -1, "an older upsert after the delete"},
			{upsert("o", 6), -1, "the upsert with the delete's seq_no: the delete orders after it"},
			{upsert("o", 7), 7, "a newer upsert after the delete"},
			{del("o", 2), 7, "an older delete after a newer upsert"},
		}
		for i, st := range steps {
			handle(t, h, st.e)
			// Read at once, without Close: nil means applied.
			if got := held(t, env, st.e.ID); got != st.held {
				t.Fatalf("step %d (%s, %s): the sink holds %s, want %s", i, desc(st.e), st.why, seqDesc(got), seqDesc(st.held))
			}
		}
	}, func() {
		// Each handler call that returned nil delivered its event already.
		seq := []redisx.Event{upsert("o", 1), upsert("o", 2), del("o", 3)}
		for i, e := range seq {
			handle(t, h, e)
			got := delivered(t, env)
			if len(got) != i+1 || !sameEvent(got[i], e) {
				t.Fatalf("after the handler of %s returned nil the target holds %d events (last %s), want %d ending with it", desc(e), len(got), lastDesc(got), i+1)
			}
		}
		// Documents handled by goroutines of their own, each in order.
		const docs, versions = 6, 8
		lanes := make([][]redisx.Event, docs)
		for d := range lanes {
			id := fmt.Sprintf("lane%d", d)
			for v := int64(1); v <= versions; v++ {
				lanes[d] = append(lanes[d], upsert(id, v))
			}
			lanes[d] = append(lanes[d], del(id, versions+1))
		}
		handleConcurrently(t, h, lanes)
		got := delivered(t, env)
		for _, lane := range lanes {
			var mine []redisx.Event
			for _, e := range got {
				if e.ID == lane[0].ID {
					mine = append(mine, e)
				}
			}
			if len(mine) != len(lane) {
				t.Errorf("document %s: %d events delivered, want %d", lane[0].ID, len(mine), len(lane))
				continue
			}
			for i := range lane {
				if !sameEvent(mine[i], lane[i]) {
					t.Errorf("document %s: event %d delivered is %s, want %s (the order it was handled in)", lane[0].ID, i, desc(mine[i]), desc(lane[i]))
					break
				}
			}
		}
	})
}

// redelivery: the same event handled twice.
func (s suite) redelivery(t *testing.T) {
	env := s.env(t)
	h := env.Sink.Handler()
	s.kind(t, func() {
		steps := []struct {
			e    redisx.Event
			held int64
		}{
			{upsert("r", 2), 2},
			{upsert("r", 2), 2},
			{upsert("r", 3), 3},
			{upsert("r", 2), 3},
			{del("r", 4), -1},
			{del("r", 4), -1},
			{upsert("r", 3), -1},
		}
		for i, st := range steps {
			handle(t, h, st.e)
			if got := held(t, env, st.e.ID); got != st.held {
				t.Fatalf("step %d (%s, redelivered): the sink holds %s, want %s", i, desc(st.e), seqDesc(got), seqDesc(st.held))
			}
		}
	}, func() {
		events := []redisx.Event{upsert("r", 2), del("r", 3)}
		for _, e := range events {
			handle(t, h, e)
			handle(t, h, e)
		}
		expectEach(t, delivered(t, env), events, 2)
	})
}

// deleteUnseen: a delete of an id never written.
func (s suite) deleteUnseen(t *testing.T) {
	env := s.env(t)
	h := env.Sink.Handler()
	e := del("never-seen", 4)
	if err := h(t.Context(), e); err != nil {
		t.Fatalf("%s of an id the sink never saw: %v (permanent: %v); want nil: deletes can be redundant, and a failed one is retried and dead-lettered",
			desc(e), err, redisx.IsPermanent(err))
	}
	s.kind(t, func() {
		if got := held(t, env, e.ID); got != -1 {
			t.Fatalf("after the delete the sink holds %s", seqDesc(got))
		}
		handle(t, h, upsert(e.ID, 3))
		if got := held(t, env, e.ID); got != -1 {
			t.Fatalf("an upsert older than the delete of an unseen id brought the document back (%s): the delete must record its order", seqDesc(got))
		}
		handle(t, h, upsert(e.ID, 5))
		if got := held(t, env, e.ID); got != 5 {
			t.Fatalf("a newer upsert after the delete: the sink holds %s, want seq_no 5", seqDesc(got))
		}
	}, func() {
		expectEach(t, delivered(t, env), []redisx.Event{e}, 1)
	})
}

// otherOps: snapshot markers and the end of an index never written.
func (s suite) otherOps(t *testing.T) {
	env := s.env(t)
	h := env.Sink.Handler()
	events := []redisx.Event{
		{StreamID: "100-0", Op: redisx.OpSnapshotStart, Target: Index},
		{StreamID: "101-0", Op: redisx.OpSnapshotEnd, Target: Index, Counts: map[string]int64{Index: 0}},
		{StreamID: "102-0", Op: redisx.OpIndexDeleted, Index: Index + "-gone", IndexUUID: goneUUID, Target: Index + "*"},
	}
	for _, e := range events {
		if err := h(t.Context(), e); err != nil {
			t.Errorf("%s: %v (permanent: %v); want nil", e.Op, err, redisx.IsPermanent(err))
		}
	}
	e := upsert("after-markers", 1)
	handle(t, h, e)
	s.kind(t, func() {
		if got := held(t, env, e.ID); got != 1 {
			t.Fatalf("an upsert after the markers: the sink holds %s, want seq_no 1", seqDesc(got))
		}
	}, func() {
		expectEach(t, delivered(t, env), append(events, e), 1)
	})
}

// errClosed: the handler after Close.
func (s suite) errClosed(t *testing.T) {
	env := s.env(t)
	h := env.Sink.Handler()
	e := upsert("before-close", 1)
	handle(t, h, e)
	if err := env.Sink.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	late := upsert("after-close", 1)
	err := h(t.Context(), late)
	if !errors.Is(err, sink.ErrClosed) || redisx.IsPermanent(err) {
		t.Errorf("handler after Close: %v (permanent: %v); want a retryable error wrapping sink.ErrClosed (the event stays pending for the next consumer)",
			err, redisx.IsPermanent(err))
	}
	if err := env.Sink.Close(t.Context()); err != nil {
		t.Errorf("a second Close: %v, want nil", err)
	}
	s.kind(t, func() {
		if got := held(t, env, e.ID); got != 1 {
			t.Errorf("after Close the sink holds %s of %s, want seq_no 1", seqDesc(got), e.ID)
		}
		if got := held(t, env, late.ID); got != -1 {
			t.Errorf("the event refused after Close was applied (%s)", seqDesc(got))
		}
	}, func() {
		expectEach(t, delivered(t, env), []redisx.Event{e}, 1)
	})
}

// closeWhileHandling: Close while goroutines keep calling the handler.
func (s suite) closeWhileHandling(t *testing.T) {
	env := s.env(t)
	h := env.Sink.Handler()
	const goroutines, before, most = 4, 20, 5000
	var (
		mu      sync.Mutex
		applied []redisx.Event
		handled atomic.Int32
		started = make(chan struct{})
		once    sync.Once
		wg      sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range most {
				e := upsert(fmt.Sprintf("w%d-%d", g, i), int64(i))
				err := h(t.Context(), e)
				if err != nil {
					if !errors.Is(err, sink.ErrClosed) || redisx.IsPermanent(err) {
						t.Errorf("a handler call as Close ran: %v (permanent: %v); want nil or a retryable error wrapping sink.ErrClosed", err, redisx.IsPermanent(err))
					}
					return
				}
				mu.Lock()
				applied = append(applied, e)
				mu.Unlock()
				if handled.Add(1) >= before {
					once.Do(func() { close(started) })
				}
			}
			t.Errorf("goroutine %d: %d handler calls returned nil, Close never refused one", g, most)
		})
	}
	select {
	case <-started:
	case <-time.After(waitLimit):
		t.Fatalf("%d handler calls returned within %s, want %d", handled.Load(), waitLimit, before)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	if err := env.Sink.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	s.kind(t, func() {
		for _, e := range applied {
			if got := held(t, env, e.ID); got != e.SeqNo {
				t.Errorf("the handler of %s returned nil, but after Close the sink holds %s", desc(e), seqDesc(got))
			}
		}
	}, func() {
		got := delivered(t, env)
		seen := map[string]bool{}
		for _, e := range got {
			seen[identity(e)] = true
		}
		for _, e := range applied {
			if !seen[identity(e)] {
				t.Errorf("the handler of %s returned nil, but after Close the target never received it", desc(e))
			}
		}
	})
}

// closeDeadline: Close while the target hangs with a handler stuck on it.
func (s suite) closeDeadline(t *testing.T) {
	if !s.feat.CloseAborts {
		t.Skip("Features.CloseAborts is false: the sink cannot give up on a target that hangs")
	}
	env := s.env(t)
	h := env.Sink.Handler()
	handle(t, h, upsert("warm-up", 1)) // caches filled, connections open: the next call goes to the target
	env.Gate.Hang()
	released := false
	release := func() {
		if !released {
			released = true
			env.Gate.Release()
		}
	}
	defer release()
	stuck := make(chan error, 1)
	go func() { stuck <- h(context.Background(), upsert("stuck", 2)) }()
	select {
	case <-env.Gate.Stuck():
	case err := <-stuck:
		t.Fatalf("the handler returned %v with its target hanging, before it reached the target", err)
	case <-time.After(waitLimit):
		t.Fatalf("the handler did not reach its hanging target within %s", waitLimit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeDeadline)
	defer cancel()
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- env.Sink.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close with a handler stuck on a hanging target: %v, want an error wrapping its ctx's (context.DeadlineExceeded)", err)
		}
	case <-time.After(closeDeadline + closeSlack):
		t.Errorf("Close(ctx) with a handler stuck on a hanging target: still waiting %s after ctx ended", closeSlack)
		release()
		select {
		case <-closed:
		case <-time.After(waitLimit):
			t.Fatalf("Close did not return within %s of its target answering again", waitLimit)
		}
	}
	t.Logf("Close returned after %s", time.Since(start).Round(time.Millisecond))
	release()
	select {
	case err := <-stuck:
		if redisx.IsPermanent(err) {
			t.Errorf("the stuck handler: %v; a permanent error dead-letters an event the target never refused", err)
		}
	case <-time.After(waitLimit):
		t.Errorf("the stuck handler did not return within %s of its target answering again", waitLimit)
	}
}

// clientsPassedIn: Close leaves the caller's clients open.
func (s suite) clientsPassedIn(t *testing.T) {
	if !s.feat.ClientsPassedIn {
		t.Skip("Features.ClientsPassedIn is false: the sink is given no client")
	}
	env := s.env(t)
	handle(t, env.Sink.Handler(), upsert("c", 1))
	if err := env.Sink.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := env.ClientsOpen(t.Context()); err != nil {
		t.Errorf("after Close: %v; a sink never closes a client passed in (whoever opened it closes it)", err)
	}
}

// positions: the redisx.Positions contract, on the store of two sinks.
func (s suite) positions(t *testing.T) {
	if !s.feat.Positions {
		t.Skip("Features.Positions is false: the sink records no applied positions")
	}
	env := s.env(t)
	ctx := t.Context()
	stream, group := redisx.NewKeys("f").Events(), "g"
	ps := env.Sink.(redisx.Positions)
	reopen := func() redisx.Positions {
		t.Helper()
		sk := env.Reopen(t)
		closeAtEnd(t, sk)
		return sk.(redisx.Positions)
	}
	applied := func(p redisx.Positions) redisx.Position {
		t.Helper()
		got, err := p.Applied(ctx, stream, group)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := applied(ps); got != (redisx.Position{}) {
		t.Fatalf("a new store holds %+v, want nothing", got)
	}
	p1 := redisx.Position{Lead: "5000-0", Low: "4000-3"}
	if err := ps.Advance(ctx, stream, group, p1, ""); err != nil {
		t.Fatal(err)
	}
	if err := ps.Advance(ctx, stream, group, redisx.Position{Lead: "4500-0", Low: "100-0"}, "5000-0"); err != nil {
		t.Fatalf("a lower position, since what the store holds: %v, want nil", err)
	}
	if got := applied(reopen()); got != p1 {
		t.Fatalf("a new sink on the store reads %+v, want %+v (never lowered)", got, p1)
	}
	if err := ps.Advance(ctx, stream, "other", redisx.Position{Lead: "1-0"}, ""); err != nil {
		t.Fatal(err)
	}
	low := redisx.Position{Lead: "2000-0", Low: "1000-0"}
	if err := ps.Reset(ctx, stream, group, low); err != nil {
		t.Fatal(err)
	}
	if got := applied(ps); got != low {
		t.Fatalf("after Reset: %+v, want %+v", got, low)
	}
	err := ps.Advance(ctx, stream, group, redisx.Position{Lead: "6000-0", Low: "5000-0"}, "5000-0")
	var be *redisx.BehindError
	if !errors.As(err, &be) || be.Recorded != low {
		t.Fatalf("Advance since 5000-0 over a store holding %+v: %v; want a *BehindError holding it", low, err)
	}
	if got, want := applied(ps), (redisx.Position{Lead: "6000-0", Low: "5000-0"}); got != want {
		t.Fatalf("after the BehindError: %+v, want %+v (recorded anyway)", got, want)
	}
	if got := applied(reopen()); got.Lead != "6000-0" {
		t.Fatalf("a new sink reads %+v, want lead 6000-0", got)
	}
}

// reconciler: Held lists what the sink holds of the index.
func (s suite) reconciler(t *testing.T) {
	if !s.feat.Reconciler {
		t.Skip("Features.Reconciler is false: the sink holds no documents of its own")
	}
	env := s.env(t)
	r := env.Sink.(sink.Reconciler)
	if err := r.Reconcilable(); err != nil {
		t.Fatalf("Reconcilable: %v, want nil for the factory's sink", err)
	}
	h := env.Sink.Handler()
	for _, e := range []redisx.Event{
		upsert("a", 3), upsert("b", 4), upsert("b", 2), del("c", 5),
		upsert("d", 2), del("d", 6), upsert("e", 7),
	} {
		handle(t, h, e)
	}
	want := map[string]int64{"a": 3, "b": 4, "e": 7}
	got := map[string]int64{}
	const pageSize = 2
	n, err := r.Held(t.Context(), Index, IndexUUID, pageSize, func(page []sink.HeldDoc) error {
		if len(page) == 0 || len(page) > pageSize {
			t.Errorf("a page of %d documents, want 1..%d", len(page), pageSize)
		}
		for _, d := range page {
			if _, dup := got[d.ID]; dup {
				t.Errorf("document %s listed twice", d.ID)
			}
			if d.Older {
				t.Errorf("document %s listed as Older: the index was never re-created", d.ID)
			}
			got[d.ID] = d.SeqNo
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Held: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Held listed %v (id: seq_no), want %v: the documents whose last event is an upsert, deletes and unseen deletes left out", got, want)
	}
	if n != int64(len(got)) {
		t.Errorf("Held returned %d, listed %d", n, len(got))
	}
}

// upsert is an upsert of document id of Index at seq, with a source that
// names both.
func upsert(id string, seq int64) redisx.Event {
	src, _ := json.Marshal(map[string]any{"id": id, "seq": seq})
	return redisx.Event{StreamID: fmt.Sprintf("%d-0", seq+1), Op: redisx.OpUpsert, Index: Index, IndexUUID: IndexUUID, ID: id,
		SeqNo: seq, PrimaryTerm: 1, Version: seq + 1, Source: src, Target: Index}
}

// del is a delete of document id stamped seq.
func del(id string, seq int64) redisx.Event {
	return redisx.Event{StreamID: fmt.Sprintf("%d-1", seq+1), Op: redisx.OpDelete, Index: Index, IndexUUID: IndexUUID, ID: id,
		SeqNo: seq, Target: Index}
}

func doc(id string) DocID { return DocID{Index: Index, IndexUUID: IndexUUID, ID: id} }

func desc(e redisx.Event) string {
	switch e.Op {
	case redisx.OpUpsert, redisx.OpDelete:
		return fmt.Sprintf("%s of %q seq_no %d", e.Op, e.ID, e.SeqNo)
	}
	return string(e.Op)
}

func lastDesc(events []redisx.Event) string {
	if len(events) == 0 {
		return "none"
	}
	return desc(events[len(events)-1])
}

func seqDesc(seq int64) string {
	if seq < 0 {
		return "nothing"
	}
	return fmt.Sprintf("the upsert of seq_no %d", seq)
}

// handle calls h and fails t on an error.
func handle(t *testing.T, h redisx.Handler, e redisx.Event) {
	t.Helper()
	if err := h(t.Context(), e); err != nil {
		t.Fatalf("handler(%s): %v", desc(e), err)
	}
}

// deal spreads events over n lists, round robin.
func deal(events []redisx.Event, n int) [][]redisx.Event {
	out := make([][]redisx.Event, n)
	for i, e := range events {
		out[i%n] = append(out[i%n], e)
	}
	return out
}

// handleConcurrently handles each list in a goroutine of its own, in
// order, and waits for all of them.
func handleConcurrently(t *testing.T, h redisx.Handler, lists [][]redisx.Event) {
	t.Helper()
	var wg sync.WaitGroup
	for _, list := range lists {
		wg.Go(func() {
			for _, e := range list {
				if err := h(t.Context(), e); err != nil {
					t.Errorf("handler(%s), called concurrently: %v", desc(e), err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// held is the seq_no of the upsert the sink holds for document id of
// Index, -1 for none; a source that is not one of the suite's upserts of
// id fails t.
func held(t *testing.T, env Env, id string) int64 {
	t.Helper()
	src, found, err := env.Holds(t.Context(), doc(id))
	if err != nil {
		t.Fatalf("read what the sink holds of %q: %v", id, err)
	}
	if !found {
		return -1
	}
	var got struct {
		ID  string `json:"id"`
		Seq *int64 `json:"seq"`
	}
	if err := json.Unmarshal(src, &got); err != nil || got.Seq == nil || got.ID != id {
		t.Fatalf("the sink holds %s for %q: not the source of one of its upserts", src, id)
	}
	if want := upsert(id, *got.Seq).Source; !jsonEqual(src, want) {
		t.Fatalf("the sink holds %s for %q, want %s", src, id, want)
	}
	return *got.Seq
}

// expectHeld checks the newest seq_no held per document (-1: none).
func expectHeld(t *testing.T, env Env, want map[string]int64) {
	t.Helper()
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if got := held(t, env, id); got != want[id] {
			t.Errorf("document %q: the sink holds %s, want %s", id, seqDesc(got), seqDesc(want[id]))
		}
	}
}

// delivered reads what an Appends sink delivered.
func delivered(t *testing.T, env Env) []redisx.Event {
	t.Helper()
	got, err := env.Delivered(t.Context())
	if err != nil {
		t.Fatalf("read what the sink delivered: %v", err)
	}
	return got
}

// expectEach checks that got holds each of want exactly times times, and
// nothing else.
func expectEach(t *testing.T, got, want []redisx.Event, times int) {
	t.Helper()
	count := map[string]int{}
	for _, e := range got {
		count[identity(e)]++
	}
	for _, e := range want {
		if c := count[identity(e)]; c != times {
			t.Errorf("%s delivered %d times, want %d", desc(e), c, times)
		}
	}
	if len(got) != len(want)*times {
		t.Errorf("%d events delivered, want %d", len(got), len(want)*times)
	}
	byID := map[string]redisx.Event{}
	for _, e := range want {
		byID[identity(e)] = e
	}
	for _, e := range got {
		if w, ok := byID[identity(e)]; ok && !sameEvent(e, w) {
			t.Errorf("delivered %s, want %s", jsonForm(e), jsonForm(w))
		}
	}
}

// identity names an event the way receivers deduplicate it.
func identity(e redisx.Event) string {
	if e.Op == redisx.OpUpsert || e.Op == redisx.OpDelete {
		return fmt.Sprintf("%s/%d/%s/%d/%s", e.IndexUUID, e.Shard, e.ID, e.SeqNo, e.Op)
	}
	return fmt.Sprintf("%s/%s/%s", e.Op, e.IndexUUID, e.Target)
}

// sameEvent compares the events' JSON forms (what the README documents
// and the append-only sinks deliver: no stream id, a target equal to the
// index left out).
func sameEvent(a, b redisx.Event) bool {
	ja, erra := a.MarshalJSON()
	jb, errb := b.MarshalJSON()
	return erra == nil && errb == nil && jsonEqual(ja, jb)
}

func jsonForm(e redisx.Event) string {
	b, err := e.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("%+v (%v)", e, err)
	}
	return string(b)
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
