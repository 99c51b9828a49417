package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// TestRelay_ReadShard_ReadAhead: while a page of a shard settles and
// commits, the shard's next page is already searched (readShard reads one
// page ahead); the pages still commit in order, one transaction each, each
// with its own hits. Ten documents in one shard, pages of 2: the commit of
// page 2 (c, d) waits until the search of page 3 (search_after 3) arrived
// or answered, then goes on or fails (the lease moves: EXEC aborts). A
// failed commit drops the page read ahead: nothing of it is committed, the
// checkpoint stays at page 1's, a search still in flight is cancelled and
// waited for before the round returns (no goroutine of it is left), and
// the next round reads the shard again from its checkpoint, each document
// once. A page read ahead whose settle check fails (its stats answer 503)
// is not committed either, while its predecessor is.
func TestRelay_ReadShard_ReadAhead(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	var all []string
	for i, id := range ids {
		all = append(all, fmt.Sprintf("%s@%d", id, i))
	}
	tests := []struct {
		name string
		// block: page 3's search is held until its request is cancelled
		// (the commit of page 2 waits for it to arrive, not to answer).
		block bool
		// fail: the commit of page 2 fails (the lease moves).
		fail bool
		// failSettle: the settle check of page 3 fails (the stats read
		// after its search answers 503; its answer comes 200 ms late, so
		// page 2's stats are read before).
		failSettle bool
	}{
		{name: "the next page answers while the page commits"},
		{name: "the commit fails after the next page answered", fail: true},
		{name: "the commit fails while the next page is searched", block: true, fail: true},
		{name: "the next page's settle check fails while the page commits", failSettle: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			e := newRoundEnv(t, "ahead")
			e.create(t, "idx", 1)
			e.write(t, "idx", ids...)
			pages := &pageWatch{next: http.DefaultTransport, arrived: make(chan struct{}), answered: make(chan struct{}), after: 3, block: tt.block, failStats: tt.failSettle}
			client, err := es.New(es.Config{URLs: []string{e.url}, Transport: pages})
			if err != nil {
				t.Fatal(err)
			}
			e.client = client
			commits := &commitWatch{id: "c", wait: pages.answered}
			if tt.block {
				commits.wait = pages.arrived
			}
			if tt.fail {
				commits.fault = func() {
					if err := e.rdb.Set(ctx, e.lease.Key(), "another-relay", time.Minute).Err(); err != nil {
						t.Error(err)
					}
				}
			}
			e.rdb.AddHook(commits)
			r := e.relay(t, []string{"idx"}, func(c *Config) { c.BatchSize = 2 })
			cur := &cursor{target: "idx"}

			err = r.round(ctx, "idx", cur)
			cancelled := pages.cancelled.Load() // before the round returned
			if n := searchesRunning(); n != 0 {
				t.Errorf("%d searches of readShard still running after the round", n)
			}
			if commits.n.Load() != 1 {
				t.Fatalf("page 2 was committed %d times in the first round, want once", commits.n.Load())
			}
			if !commits.ahead.Load() {
				t.Errorf("page 3 was not searched while page 2 committed")
			}
			cp, _ := e.shardState(t, cur.uuid, 0)
			if !tt.fail && !tt.failSettle {
				if err != nil {
					t.Fatalf("round: %v", err)
				}
				if got, want := e.upserted(t), all[:8]; !slices.Equal(got, want) || cp != 7 {
					t.Errorf("upserts %v, checkpoint %d; want %v, 7 (the last page held)", got, cp, want)
				}
				for _, ev := range e.events(t) {
					if want := fmt.Sprintf(`{"v":%q}`, ev.ID); string(ev.Source) != want {
						t.Errorf("event %s@%d carries source %s, want %s: a page's hits were overwritten by the next page's", ev.ID, ev.SeqNo, ev.Source, want)
					}
				}
			} else {
				// Committed: page 1, and page 2 unless its commit failed.
				wantCP := int64(3)
				if tt.fail {
					wantCP = 1
				}
				switch {
				case tt.fail && !errors.Is(err, redisx.ErrLeaseLost):
					t.Fatalf("round: %v, want the commit's lease lost", err)
				case tt.failSettle && (err == nil || !strings.Contains(err.Error(), "503")):
					t.Fatalf("round: %v, want the settle check's stats answering 503", err)
				}
				if got, want := e.upserted(t), all[:wantCP+1]; !slices.Equal(got, want) || cp != wantCP {
					t.Errorf("after the failure: upserts %v, checkpoint %d; want %v, %d", got, cp, want, wantCP)
				}
				if len(cur.pending) != 0 || r.held != 0 {
					t.Errorf("after the failure: pages pending %v, %d hits held; want none", sortedShards(cur.pending), r.held)
				}
				if tt.block && !cancelled {
					t.Errorf("the search of page 3 was not cancelled before the round returned")
				}
				// What the loop does after an error: the lease back, the
				// state loaded again, the shard read from its checkpoint.
				if err := e.rdb.Set(ctx, e.lease.Key(), e.lease.Token(), time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				cur.loaded = false
				cur.nextTick()
				if err := r.round(ctx, "idx", cur); err != nil {
					t.Fatalf("the round after the failure: %v", err)
				}
			}
			cur.nextTick()
			if err := r.round(ctx, "idx", cur); err != nil {
				t.Fatalf("the round that settles the last page: %v", err)
			}
			if n := searchesRunning(); n != 0 {
				t.Errorf("%d searches of readShard still running after the rounds", n)
			}
			cp, _ = e.shardState(t, cur.uuid, 0)
			if got := e.upserted(t); !slices.Equal(got, all) || cp != 9 {
				t.Errorf("at the end: upserts %v, checkpoint %d; want %v (each once, in order), 9", got, cp, all)
			}
			if len(cur.pending) != 0 || r.held != 0 {
				t.Errorf("at the end: pages pending %v, %d hits held; want none", sortedShards(cur.pending), r.held)
			}
		})
	}
}

// pageWatch is an HTTP transport that watches the searches of the page
// after seq no after: it closes arrived when one is sent and answered once
// its response is read in full. With block, that search is held until its
// request is cancelled, and answers 100 ms later (once; cancelled then
// reports it). With failStats, that search answers 200 ms late and the
// first _stats request after it answers 503.
type pageWatch struct {
	next              http.RoundTripper
	after             int64
	block, failStats  bool
	statsArmed        atomic.Bool
	arrived, answered chan struct{}
	once, answerOnce  sync.Once
	blocked           atomic.Bool
	answeredLate      atomic.Bool
	cancelled         atomic.Bool
}

func (p *pageWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, "/_stats") && p.statsArmed.CompareAndSwap(true, false) {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Request: req,
			Header: http.Header{"Content-Type": []string{"application/json"}},
			Body:   io.NopCloser(strings.NewReader(`{"error":{"type":"unavailable","reason":"injected by the test"},"status":503}`))}, nil
	}
	if !strings.HasSuffix(req.URL.Path, "/_search") || req.Body == nil {
		return p.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	var q struct {
		SearchAfter []int64 `json:"search_after"`
	}
	if err := json.Unmarshal(body, &q); err != nil || len(q.SearchAfter) != 1 || q.SearchAfter[0] != p.after {
		return p.next.RoundTrip(req)
	}
	p.once.Do(func() { close(p.arrived) })
	if p.block && p.blocked.CompareAndSwap(false, true) {
		select {
		case <-req.Context().Done():
			// Slow to give up, as a connection being torn down: a
			// reader that does not wait for its search returns first.
			time.Sleep(100 * time.Millisecond)
			p.cancelled.Store(true)
			return nil, req.Context().Err()
		case <-time.After(10 * time.Second):
		}
	}
	resp, err := p.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if p.failStats && !p.answeredLate.Swap(true) {
		time.Sleep(200 * time.Millisecond)
		p.statsArmed.Store(true)
	}
	p.answerOnce.Do(func() { close(p.answered) })
	return resp, nil
}

// commitWatch is a go-redis hook on the commit (MULTI … EXEC) whose XADDs
// hold the document id: the first time, it waits (5 s at most) for wait
// to close, then 50 ms for the answer to be decoded, then runs fault, if any,
// before the commit goes on. n counts those commits; ahead reports that
// wait had closed.
type commitWatch struct {
	id    string
	wait  chan struct{}
	fault func()
	n     atomic.Int64
	ahead atomic.Bool
}

func (c *commitWatch) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (c *commitWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (c *commitWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !c.holds(cmds) {
			return next(ctx, cmds)
		}
		if c.n.Add(1) == 1 {
			select {
			case <-c.wait:
				c.ahead.Store(true)
				// The hits are decoded into the page's buffer once the
				// response is read: give it the time.
				time.Sleep(50 * time.Millisecond)
			case <-time.After(5 * time.Second):
			}
			if c.fault != nil {
				c.fault()
			}
		}
		return next(ctx, cmds)
	}
}

// holds reports whether an XADD of cmds carries the document id c.id.
func (c *commitWatch) holds(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		args := cmd.Args()
		if len(args) == 0 || fmt.Sprint(args[0]) != "xadd" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] != "id" {
				continue
			}
			if s, ok := args[i+1].(*string); ok && *s == c.id {
				return true
			}
		}
	}
	return false
}

// searchesRunning counts the goroutines of Relay.readAhead alive, giving
// them a second to exit: one that finished its work (readShard waited for
// it) may still be on its way out.
func searchesRunning() int {
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		if n := strings.Count(string(buf), "relay.(*Relay).readAhead.func"); n == 0 || time.Now().After(deadline) {
			return n
		}
	}
}
