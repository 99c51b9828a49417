package e2e

// Reliability scenario "Redis paused and restarted" (issue #8, item 3): the
// feed's Redis is frozen (SIGSTOP/SIGCONT), SIGKILLed and restarted on its
// append-only file (appendfsync always and everysec, plus a simulated power
// failure that drops the last second of unsynced writes), and restarted
// without persistence. The relay and consumer binaries must carry on by
// themselves where the state survived, and the relay must refuse (saying
// to resync) where it did not.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

const (
	rigIndex = "orders"
	rigGroup = "mirror"
)

// redisFaultRig is a feed under a Redis fault: a source cluster with 2
// writers (creates, updates, deletes), the relay binary with --deletes,
// and consumer binaries mirroring into a target cluster with the bulk sink.
type redisFaultRig struct {
	src, dst  testCluster
	index     string // src.Index(rigIndex), in the target too
	srv       *redistest.Server
	rdb       *redis.Client
	f         *feed
	relay     *proc
	consumers []*proc
	// tap reads the stream as entries arrive: what readers saw, kept
	// when Redis loses it.
	tap *streamTap

	stop    chan struct{}
	wg      sync.WaitGroup
	writers []*writer
}

// startRedisFaultRig starts the writers, the relay binary (with the extra
// args) and n consumer binaries on srv.
func startRedisFaultRig(tb testing.TB, srv *redistest.Server, feedName string, consumers int, relayExtra ...string) *redisFaultRig {
	tb.Helper()
	r := &redisFaultRig{srv: srv, rdb: srv.Client(tb), stop: make(chan struct{})}
	r.clusters(tb)
	r.f = &feed{name: feedName, rdb: r.rdb, keys: redisx.NewKeys(feedName), store: storeFor(tb, srv, feedName)}
	r.tap = startTap(tb, r.rdb, r.f.keys.Events())
	r.relay = startBinary(tb, r.relayArgs("run", relayExtra...)...)
	for i := 0; i < consumers; i++ {
		r.consumers = append(r.consumers, startBinary(tb, consumeArgs(srv.URL(), feedName, rigGroup, fmt.Sprintf("c%d", i), r.dst.URL())...))
	}
	r.startWriters(tb, 83)
	return r
}

// clusters gives the rig its source, with the index of 3 shards and 1
// replica, and its target.
func (r *redisFaultRig) clusters(tb testing.TB) {
	tb.Helper()
	r.src = esCluster(tb, esemu.Config{Nodes: 2, OutOfOrder: true})
	r.dst = mirrorTarget(tb, r.src, esemu.Config{})
	r.index = r.src.Index(rigIndex)
	createIndex(tb, r.src, r.index, 3, 1)
	// The writers use custom routing: the bulk sink writes routed events
	// only into a target that places them as the source does.
	createIndex(tb, r.dst, r.index, 3, 0)
}

// startWriters starts the rig's 2 writers (with an ack log on a real
// cluster, for the audit), stopped at the end of the test.
func (r *redisFaultRig) startWriters(tb testing.TB, seed uint64) {
	var acks *ackLog
	if !onEmulator(r.src) {
		acks = newAckLog()
	}
	for i := 0; i < 2; i++ {
		w := &writer{url: r.src.URL(), index: r.index, id: i, rng: rand.New(rand.NewPCG(uint64(i), seed)), routing: map[string]string{}, deletes: true, acks: acks}
		r.writers = append(r.writers, w)
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.write(tb, w) }()
	}
	tb.Cleanup(r.stopWriters)
}

// conflicts describes the events the target refused as applied already
// (409): the emulator counts them; a real target does not.
func (r *redisFaultRig) conflicts() string {
	if n, ok := versionConflicts(r.dst); ok {
		return fmt.Sprintf("%d events applied twice at the target (409), 0 effective", n)
	}
	return "events applied twice at the target not counted (a real target has no counter of its 409s)"
}

// needsEmulator skips a test that needs the emulator's controls on a real
// cluster before it starts anything (cluster skips too, but only where it
// is called: after the Redis servers a test starts first).
func needsEmulator(tb testing.TB, what string) {
	tb.Helper()
	if realClusterEnv(tb) != nil {
		tb.Skipf("needs the emulator's %s, which a real cluster lacks", what)
	}
}

// relayArgs are the arguments of `run` or `resync` for the rig's feed: a
// lease TTL of 10 s (the default), so a quick Redis restart keeps it.
func (r *redisFaultRig) relayArgs(command string, extra ...string) []string {
	args := relayArgs(r.src, r.srv.URL(), r.f.name, r.index, append([]string{"--deletes", "--delete-scan-interval", "200ms", "--delete-scan-budget", "1", "--lease-ttl", "10s"}, extra...)...)
	return append([]string{command}, args[1:]...)
}

// write is writer.run at a bounded rate (some 150 writes a second), so the
// consumers keep up and the audit stays quick.
func (r *redisFaultRig) write(tb testing.TB, w *writer) {
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		if w.rng.IntN(5) == 0 {
			w.bulk(tb)
		} else {
			w.one(tb)
		}
	}
}

func (r *redisFaultRig) stopWriters() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
}

func (r *redisFaultRig) writes() int {
	n := 0
	for _, w := range r.writers {
		n += w.ops
	}
	return n
}

// requireRunning fails unless the relay and every consumer still run: they
// must ride out the fault by themselves.
func (r *redisFaultRig) requireRunning(tb testing.TB, when string) {
	tb.Helper()
	for i, p := range append([]*proc{r.relay}, r.consumers...) {
		if !binaryRunning(p) {
			what := "the relay"
			if i > 0 {
				what = fmt.Sprintf("consumer c%d", i-1)
			}
			tb.Fatalf("%s exited %s:\n%s", what, when, p.out)
		}
	}
}

// finish stops the writers, waits until the feed caught up, the stream
// replays to the index, the group is done and the target mirrors the
// source exactly, and audits the stream.
func (r *redisFaultRig) finish(tb testing.TB) (auditResult, int) {
	tb.Helper()
	r.stopWriters()
	waitCaughtUp(tb, r.src, r.f.store, []string{r.index}, 60*time.Second)
	waitMirror(tb, r.src, r.f, r.index, 30*time.Second)
	waitGroupDone(tb, r.rdb, r.f.keys.Events(), rigGroup, 60*time.Second)
	docs := waitTargetMirror(tb, r.src, r.dst, r.index, 30*time.Second)
	if dead, _ := r.rdb.XLen(context.Background(), r.f.keys.Dead()).Result(); dead != 0 {
		tb.Errorf("%d events dead-lettered: a Redis outage must not use up deliveries", dead)
	}
	a := auditBackend(tb, r.src, []string{r.index}, entries(tb, r.rdb, r.f.keys.Events()), r.writers)
	if a.Deletes == 0 {
		tb.Errorf("no delete event in %d entries: the scenario did not exercise deletes", a.Entries)
	}
	return a, docs
}

// binaryRunning reports whether the process has not exited (a child that
// exited stays a zombie until waited for: look at its state).
func binaryRunning(p *proc) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// feedProgress is what the feed has done so far: entries the relay added
// to the stream, and entries the group acknowledged.
type feedProgress struct{ added, acked int64 }

func (r *redisFaultRig) progress() (feedProgress, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	info, err := r.rdb.XInfoStream(ctx, r.f.keys.Events()).Result()
	if err != nil {
		return feedProgress{}, false
	}
	groups, err := r.rdb.XInfoGroups(ctx, r.f.keys.Events()).Result()
	if err != nil {
		return feedProgress{}, false
	}
	for _, g := range groups {
		if g.Name == rigGroup {
			return feedProgress{added: info.EntriesAdded, acked: g.EntriesRead - g.Pending}, true
		}
	}
	return feedProgress{}, false
}

// waitResumed measures how long, from now (Redis answers again), the relay
// takes to add an entry and the group to acknowledge one beyond what Redis
// held when first asked.
func (r *redisFaultRig) waitResumed(tb testing.TB, timeout time.Duration) (relay, consumers time.Duration) {
	tb.Helper()
	start := time.Now()
	var from feedProgress
	known := false
	for time.Since(start) < timeout {
		p, ok := r.progress()
		switch {
		case !ok:
		case !known:
			from, known = p, true
		default:
			if relay == 0 && p.added > from.added {
				relay = time.Since(start)
			}
			if consumers == 0 && p.acked > from.acked {
				consumers = time.Since(start)
			}
			if relay > 0 && consumers > 0 {
				return relay, consumers
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("the feed did not resume within %s (relay after %s, consumers after %s):\nrelay:\n%s", timeout, relay, consumers, r.relay.out)
	return 0, 0
}

// Log lines that say Redis failed, and that it works again. The relay logs
// failures per loop (index loop, lease, delete scans) and each once per
// change of error; the consumers once per outage.
var (
	relayRedisFailed = []string{`msg="round failed`, `msg="lost the lease`, `msg="cannot acquire the lease`,
		`msg="cannot read the feed's state`, `msg="Redis lost changes`}
	relayRedisOK        = []string{`msg=recovered`, `msg="acquired the lease`}
	consumerRedisFailed = []string{`msg="read failed`, `msg="reclaim failed`, `msg="cannot refresh the idle time`,
		`msg="XACK failed`, `msg="cannot count a retry`, `msg="cannot dead-letter`}
	consumerRedisOK = []string{`msg="Redis answers again; recovered"`}
)

// outageLog checks the log of a process that lived through Redis faults:
// it says a failure at most perFault times per fault (not once per retry),
// with strict never twice in a row without its recovery in between, and
// every failure it said is followed by a recovery; go-redis's own logger
// (a line per failed dial) stays quiet. It returns the numbers of failure
// and recovery lines.
func outageLog(tb testing.TB, name string, p *proc, failed, ok []string, faults, perFault int, strict bool) (nFailed, nOK int) {
	tb.Helper()
	has := func(l string, subs []string) bool {
		for _, s := range subs {
			if strings.Contains(l, s) {
				return true
			}
		}
		return false
	}
	failing := false
	var said []string
	for _, l := range strings.Split(p.out.String(), "\n") {
		switch {
		case has(l, failed):
			if failing && strict {
				tb.Errorf("%s logged a second Redis failure before its recovery (one line per state change, not per retry):\n%s", name, strings.Join(append(said, l), "\n"))
			}
			failing = true
			nFailed++
			said = append(said, l)
		case has(l, ok) && failing:
			failing = false
			nOK++
			said = append(said, l)
		}
	}
	for _, l := range said {
		tb.Logf("%s: %s", name, l)
	}
	if n := strings.Count(p.out.String(), "redis: connection pool:"); n > 0 {
		tb.Errorf("%s printed %d lines of go-redis's own logger (one per failed dial)", name, n)
	}
	if failing {
		tb.Errorf("%s logged a Redis failure and never its recovery", name)
	}
	if nFailed > perFault*faults {
		tb.Errorf("%s logged %d Redis failures for %d faults (want at most %d each)", name, nFailed, faults, perFault)
	}
	return nFailed, nOK
}

// checkOutageLogs checks the logs of the rig's processes after faults and
// sums up what they said.
func (r *redisFaultRig) checkOutageLogs(tb testing.TB, faults int) string {
	tb.Helper()
	rf, rok := outageLog(tb, "relay", r.relay, relayRedisFailed, relayRedisOK, faults, 4, false)
	cf, cok := 0, 0
	for i, c := range r.consumers {
		f, ok := outageLog(tb, fmt.Sprintf("c%d", i), c, consumerRedisFailed, consumerRedisOK, faults, 2, true)
		cf, cok = cf+f, cok+ok
	}
	return fmt.Sprintf("logs: relay %d failure and %d recovery lines, consumers %d and %d", rf, rok, cf, cok)
}

// TestReliability_RedisPaused freezes the feed's Redis (SIGSTOP) for 5 s,
// three times, while 2 writers index, update and delete, the relay binary
// (--deletes) follows and 2 consumer binaries mirror into a second cluster.
// Neither the relay nor the consumers may exit or need a restart; a pause
// mostly shows as latency (calls wait and complete after SIGCONT), and what
// fails is logged once per outage with its end; afterwards the mirror is
// exact, the group is done and the stream audits clean.
func TestReliability_RedisPaused(t *testing.T) {
	t.Parallel()
	const pauses, frozen = 3, 5 * time.Second
	binary(t)
	srv := redistest.Start(t)
	r := startRedisFaultRig(t, srv, "paused", 2)
	time.Sleep(time.Second)
	var relayResume, consumerResume []time.Duration
	for i := 0; i < pauses; i++ {
		srv.Pause()
		time.Sleep(frozen)
		srv.Resume()
		rd, cd := r.waitResumed(t, 30*time.Second)
		relayResume, consumerResume = append(relayResume, rd), append(consumerResume, cd)
		r.requireRunning(t, fmt.Sprintf("after pause %d", i+1))
		time.Sleep(500 * time.Millisecond)
	}
	a, docs := r.finish(t)
	r.requireRunning(t, "at the end")
	logs := r.checkOutageLogs(t, pauses)
	record(t, figure{Scenario: "Redis paused (SIGSTOP 5 s), relay --deletes + 2 consumers, bulk sink", Faults: pauses,
		Entries: a.Entries, Docs: docs, Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes, %d delete events; no process restarted; after SIGCONT the relay wrote again after %v, the group acked again after %v; %s (reclaimed after min-idle); %s",
			r.writes(), a.Deletes, roundAll(relayResume), roundAll(consumerResume), r.conflicts(), logs)})
}

// TestReliability_RedisRestartedAOF SIGKILLs the feed's Redis and starts it
// again on its append-only file while the relay and 2 consumers run: twice
// at once, once after 3 s down. With appendfsync always nothing is lost:
// Redis fsyncs before it replies. With everysec Redis replies before its
// background fsync, and while one is slow it holds back writing the AOF
// (up to 2 s): an LD_PRELOAD shim makes every fsync take a second, and
// each kill waits until Redis holds acknowledged writes it has not written
// yet, so every kill loses acknowledged commits, as a power failure does.
// Redis comes back with an older but consistent state (each commit is one
// MULTI/EXEC); the relay must notice, read the lost changes again from the
// cluster, record the loss, and delete the documents of the lost entries
// gone since (consumers may have applied them: a tap reading the stream
// shows what readers saw); the consumers wait for that record and go on.
// The audit allows those deletes as redundant only after a recorded loss.
func TestReliability_RedisRestartedAOF(t *testing.T) {
	t.Parallel()
	for _, fsync := range []string{"always", "everysec"} {
		t.Run(fsync, func(t *testing.T) {
			const kills = 3
			binary(t)
			opts := redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", fsync, "--auto-aof-rewrite-percentage", "0"}}
			if fsync == "everysec" {
				opts.SlowFsync = time.Second
			}
			srv := redistest.Start(t, opts)
			r := startRedisFaultRig(t, srv, "aof-"+fsync, 2)
			var relayResume, consumerResume []time.Duration
			var lost []int64 // per counted kill: commits acknowledged before it that its AOF lacks
			var missed []string
			attempts := 0
			for lossy := 0; lossy < kills; attempts++ {
				if attempts == kills+3 {
					t.Fatalf("%d of %d kills lost commits acknowledged before them (%s): Redis wrote what it held back before the kill, each time", lossy, attempts, strings.Join(missed, "; "))
				}
				// Time for Redis to write (not fsync) what it holds: with
				// slow fsyncs it holds writes back up to 2 s, and a kill
				// before its first write loses the whole feed (a lost state
				// the relay refuses, rightly: another test's scenario).
				time.Sleep(3 * time.Second)
				var mark feedMark
				before := len(recordedRollbacks(t, r.rdb, r.f.keys))
				if fsync == "everysec" {
					mark = r.waitUnwritten(t) // a kill now loses acknowledged commits, unless Redis writes first
				}
				srv.Stop()
				var files string
				if fsync == "everysec" {
					files = srv.CopyFiles(t) // what Redis holds when it starts again
				}
				if lossy == kills-1 {
					// Down for a while: the clients meet errors, not just
					// a reconnect.
					time.Sleep(3 * time.Second)
				}
				srv.StartAgain()
				if fsync == "always" {
					lossy++
				} else {
					// What the kill lost: the commit counter in the files
					// Redis came back on, read by a server of their own
					// (the relay commits again before a reading here).
					held := r.commitsIn(t, files, opts.Args)
					if held >= mark.commits {
						// The loss the test waited for was written in the
						// meantime (a descheduled test): the relay may
						// still have lost later commits, but need not.
						missed = append(missed, fmt.Sprintf("kill %d: the AOF holds %d commits, %d were acknowledged before it", attempts+1, held, mark.commits))
						t.Logf("kill %d lost no commit acknowledged before it (AOF %d commits, %d acknowledged): not counted", attempts+1, held, mark.commits)
					} else {
						lossy++
						// Told by the relay, which lived through it: a loss
						// it records (meta rollbacks) at its next commit.
						rb := r.waitRollbacks(t, before+1, 30*time.Second)
						lost = append(lost, mark.commits-held)
						if rb.Commits < mark.commits-held {
							t.Errorf("kill %d lost commits %d..%d (acknowledged before it), the relay recorded a loss of %d", attempts+1, held+1, mark.commits, rb.Commits)
						}
					}
				}
				rd, cd := r.waitResumed(t, 60*time.Second)
				relayResume, consumerResume = append(relayResume, rd), append(consumerResume, cd)
				r.requireRunning(t, fmt.Sprintf("after restart %d", attempts+1))
			}
			a, docs := r.finish(t)
			r.requireRunning(t, "at the end")
			logs := r.checkOutageLogs(t, attempts)
			rbs := recordedRollbacks(t, r.rdb, r.f.keys)
			a.allowRedundant(rbs)
			scenario := fmt.Sprintf("Redis SIGKILLed and restarted (appendfsync %s), relay --deletes + 2 consumers", fsync)
			note := fmt.Sprintf("%d writes, %d delete events; no process restarted; after Redis came back the relay wrote again after %v, the group acked again after %v; %s; %s",
				r.writes(), a.Deletes, roundAll(relayResume), roundAll(consumerResume), logs, r.conflicts())
			if fsync == "always" {
				note = "process kills lose nothing at appendfsync always (nor would a power failure: each write is fsynced before its reply); " + note
				if len(rbs) != 0 {
					t.Errorf("appendfsync always: the relay recorded %d losses, want none", len(rbs))
				}
			} else {
				scenario = "Redis SIGKILLed with acknowledged writes not yet in its AOF (appendfsync everysec, fsyncs slowed to 1 s), relay --deletes + 2 consumers"
				var commits, docsAgain int64
				for _, rb := range rbs {
					commits += rb.Commits
					docsAgain += int64(rb.Documents)
				}
				if len(rbs) == 0 {
					t.Errorf("the kills lost commits %v, but the relay recorded no loss", lost)
				}
				seen := seenLost(r.tap, entries(t, r.rdb, r.f.keys.Events()))
				note = fmt.Sprintf("%d kills lost commits acknowledged before them (at least %v, by the commit counter of the AOF left on disk)%s; the relay recorded %d losses (%d commits, %d documents recorded again for delete scans) and read the lost changes again; "+
					"%d redundant deletes (documents of lost entries deleted since; readers had seen %d documents in lost entries); %s",
					len(lost), lost, notCounted(missed), len(rbs), commits, docsAgain, a.Redundant, len(seen), note)
			}
			if a.Lost+a.Duplicated+a.Wrong != 0 {
				t.Logf("audit problems:\n%s", strings.Join(a.Problems, "\n"))
			}
			record(t, figure{Scenario: scenario, Faults: attempts, Entries: a.Entries, Docs: docs,
				Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong, Note: note})
		})
	}
}

// commitsIn is the feed's commit counter (meta commits) in a copy of a
// killed server's files (redistest.Server.CopyFiles), read by a server
// started on them with args.
func (r *redisFaultRig) commitsIn(tb testing.TB, dir string, args []string) int64 {
	tb.Helper()
	srv := redistest.Start(tb, redistest.Options{Args: args, Dir: dir})
	defer srv.Stop()
	meta := r.f.keys.Meta()
	n, err := srv.Client(tb).HGet(context.Background(), meta, checkpoint.MetaCommits).Int64()
	if err != nil {
		tb.Fatalf("read %s %s in the killed server's files: %v", meta, checkpoint.MetaCommits, err)
	}
	return n
}

// notCounted says which kills lost nothing acknowledged before them.
func notCounted(missed []string) string {
	if len(missed) == 0 {
		return ""
	}
	return " (" + strings.Join(missed, "; ") + ": not counted)"
}

// waitRollbacks waits until the relay recorded n losses of the feed's
// Redis (meta rollbacks) and returns the newest.
func (r *redisFaultRig) waitRollbacks(tb testing.TB, n int, timeout time.Duration) redisx.Rollback {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var rbs []redisx.Rollback
	for {
		// Errors (Redis still loading its AOF) are read past until the
		// deadline.
		v, err := r.rdb.HGet(context.Background(), r.f.keys.Meta(), redisx.RollbacksField).Result()
		if err == nil {
			if rbs, err = redisx.ParseRollbacks(v); err != nil {
				tb.Fatal(err)
			}
			if len(rbs) >= n {
				return rbs[len(rbs)-1]
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the relay recorded %d losses of Redis within %s, want %d:\n%s", len(rbs), timeout, n, r.relay.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitUnwritten waits until the feed's Redis holds acknowledged writes
// back from its append-only file (redistest.AOFHeldBack), and returns the
// feed's mark then: a kill now loses them.
func (r *redisFaultRig) waitUnwritten(tb testing.TB) feedMark {
	tb.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		// A commit acknowledged between the readings was held back too: a
		// kill now loses it.
		var first, commits *redis.StringCmd
		var last *redis.XMessageSliceCmd
		held, err := redistest.AOFHeldBack(ctx, r.rdb, func(p redis.Pipeliner, second bool) {
			if !second {
				first = p.HGet(ctx, r.f.keys.Meta(), checkpoint.MetaCommits)
				return
			}
			commits = p.HGet(ctx, r.f.keys.Meta(), checkpoint.MetaCommits)
			last = p.XRevRangeN(ctx, r.f.keys.Events(), "+", "-", 1)
		})
		if err != nil || !held || commits.Val() == first.Val() {
			continue
		}
		m := feedMark{last: "0-0"}
		m.commits, _ = strconv.ParseInt(commits.Val(), 10, 64)
		if l := last.Val(); len(l) > 0 {
			m.last = l[0].ID
		}
		return m
	}
	tb.Fatal("Redis never held writes back from its AOF within 30s: the slow-fsync shim is not working")
	return feedMark{}
}

// feedMark is how far the feed's Redis is: its meta commit counter and
// the stream's last entry id.
type feedMark struct {
	commits int64
	last    string
}

// TestReliability_RedisRestartedEmpty restarts the feed's Redis without
// persistence under the running relay (--deletes) while writers write: the
// relay must not start the feed again silently (consumers would never get
// the deletes of the gap). It must exit 1 telling the user to run `resync`,
// leaving nothing in the empty Redis; `resync` then `run` rebuild a
// complete stream.
func TestReliability_RedisRestartedEmpty(t *testing.T) {
	binary(t)
	srv := redistest.Start(t)
	r := startRedisFaultRig(t, srv, "volatile", 0)
	ctx := context.Background()
	waitReached(t, r.src, r.f.store, []string{r.index}, 30*time.Second)
	time.Sleep(time.Second)
	before, _ := r.rdb.XLen(ctx, r.f.keys.Events()).Result()
	srv.Restart()
	restarted := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.relay.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay kept running on a Redis that lost the feed:\n%s", r.relay.out)
	}
	took := time.Since(restarted)
	code := r.relay.cmd.ProcessState.ExitCode()
	out := strings.TrimSpace(r.relay.out.String())
	last := out[strings.LastIndex(out, "\n")+1:]
	if code != 1 || !strings.Contains(last, "state is lost") || !strings.Contains(last, "es-changefeed resync") {
		t.Fatalf("exit %d, last line %q; want exit 1 and a line saying the state is lost and to run `es-changefeed resync`:\n%s", code, last, out)
	}
	if keys, err := r.rdb.Keys(ctx, "*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("the refusing relay wrote to the empty Redis: keys %v (%v)", keys, err)
	}
	for _, l := range logLines(r.relay, "level=WARN", "level=ERROR", "es-changefeed:") {
		t.Logf("relay: %s", l)
	}
	// Changes and deletes go on while no relay runs. The snapshot is taken
	// once the writers stopped and every op is below the global checkpoint
	// (an op above it would be in the snapshot and read again after).
	time.Sleep(time.Second)
	r.stopWriters()
	waitSettled(t, r.src, r.index)
	q := startBinary(t, r.relayArgs("resync")...)
	waitCaughtUp(t, r.src, r.f.store, []string{r.index}, 30*time.Second)
	if err := q.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := q.cmd.Wait(); err != nil {
		t.Fatalf("resync after SIGTERM: %v\n%s", err, q.out)
	}
	p := startBinary(t, r.relayArgs("run")...)
	// Through a writer: on a real cluster the audit judges by its acks.
	w := r.writers[0]
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("after-%d", i)
		w.do(t, "PUT", fmt.Sprintf("%s/%s/_doc/%s", r.src.URL(), r.index, id), `{"after":"resync"}`, id)
	}
	w.do(t, "DELETE", fmt.Sprintf("%s/%s/_doc/after-3", r.src.URL(), r.index), "", "after-3")
	w.deleted = append(w.deleted, "after-3")
	waitCaughtUp(t, r.src, r.f.store, []string{r.index}, 30*time.Second)
	evs := waitMirror(t, r.src, r.f, r.index, 30*time.Second)
	if !binaryRunning(p) {
		t.Fatalf("run after resync exited:\n%s", p.out)
	}
	p.kill()
	var starts, ends int
	for _, e := range evs {
		switch e.Op {
		case redisx.OpSnapshotStart:
			starts++
		case redisx.OpSnapshotEnd:
			ends++
		}
	}
	if starts != 1 || ends != 1 {
		t.Errorf("snapshot_start %d, snapshot_end %d; want 1 each", starts, ends)
	}
	a := auditBackend(t, r.src, []string{r.index}, evs, r.writers)
	if a.Lost+a.Duplicated+a.Wrong != 0 {
		t.Logf("audit problems:\n%s", strings.Join(a.Problems, "\n"))
	}
	record(t, figure{Scenario: "Redis restarted without persistence (state gone) under the relay", Faults: 1,
		Entries: a.Entries, Docs: a.Docs, Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d entries were lost with Redis; the running relay exited 1 %s after Redis answered again, saying to run `es-changefeed resync`, writing nothing to the empty Redis; resync then run rebuilt the stream (snapshot of %d documents, %d deletes after); "+
			"a relay started afresh on the empty Redis cannot tell it from a new feed",
			before, took.Round(time.Millisecond), a.Docs, a.Deletes)})
}

// logLines returns the lines of a process's output that contain any of subs.
func logLines(p *proc, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(p.out.String(), "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// waitSettled waits until every shard's global checkpoint covers every op
// started.
func waitSettled(tb testing.TB, c backend, index string) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		behind := ""
		for n, ss := range inspect(c).shards(tb, index) {
			if ss.gcp != ss.max {
				behind = fmt.Sprintf("%s/%d: gcp %d behind max seq no %d", index, n, ss.gcp, ss.max)
				break
			}
		}
		if behind == "" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal(behind)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func roundAll(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond).String()
	}
	return out
}
