package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/sink"
	"github.com/es-changefeed/es-changefeed/tests/pgtest"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// postgresConsumeArgs are the flags of a `consume --sink postgres`.
// 16 lanes: a transaction holds about half the lanes' events. With 4 (2
// events a transaction, each one also recording what it applied in
// escf__applied_slots) one CI run on elasticsearch-8, three engines'
// suites at once, left the group 5,301 entries to go after 60 s — most
// likely a drain too slow for the deadline (the same test passed alone
// on that engine in 24 s); TestReliability_PostgresSink now logs the
// consumers' last lines when it fails.
func postgresConsumeArgs(redisURL, feed, group, consumer, pgURL string) []string {
	return []string{"consume", "--redis", redisURL, "--feed", feed, "--group", group, "--consumer", consumer,
		"--sink", "postgres", "--postgres-url", pgURL, "--workers", "16", "--min-idle", "500ms", "--shutdown-timeout", "5s",
		"--wait-for-feed", "1m"}
}

// pgDoc is a row of a synced table: what the sink keeps of a document.
type pgDoc struct {
	source string // normalized JSON (keys sorted)
	seq    int64
	uuid   string
	shard  int
}

// pgRows reads every row of a synced table, keyed by (id, routing).
func pgRows(tb testing.TB, pool *pgxpool.Pool, table string) map[[2]string]pgDoc {
	tb.Helper()
	rows, err := pool.Query(context.Background(), "SELECT id, routing, source::text, seq_no, index_uuid, shard FROM "+pgx.Identifier{"public", table}.Sanitize())
	if err != nil {
		tb.Fatalf("read table %s: %v", table, err)
	}
	defer rows.Close()
	out := map[[2]string]pgDoc{}
	for rows.Next() {
		var id, routing, src string
		var d pgDoc
		if err := rows.Scan(&id, &routing, &src, &d.seq, &d.uuid, &d.shard); err != nil {
			tb.Fatal(err)
		}
		d.source = normJSON(tb, src)
		out[[2]string{id, routing}] = d
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// normJSON re-renders JSON with sorted keys and no spaces: jsonb prints
// its own way ({"a": 1}, keys by length).
func normJSON(tb testing.TB, s string) string {
	tb.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		tb.Fatalf("%q: %v", s, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// diffPostgres says how the table differs from the index ("" when it
// holds exactly the index's documents: one row per (id, routing) with the
// document's source, seq_no, index uuid and shard), how many documents
// differ (missing, other, or rows the index lacks) and how many the index
// has.
func diffPostgres(tb testing.TB, src backend, pool *pgxpool.Pool, index, table string) (diff string, wrong, docs int) {
	tb.Helper()
	want := clusterDocs(tb, src, index)
	got := pgRows(tb, pool, table)
	wantRows := map[[2]string]bool{}
	var problems []string
	for k, d := range want {
		wantRows[[2]string{k.id, d.routing}] = true
		r, ok := got[[2]string{k.id, d.routing}]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing %s (routing %q, seq %d)", k.id, d.routing, d.seq))
		case r.source != normJSON(tb, d.source):
			problems = append(problems, fmt.Sprintf("%s: source %s, want %s", k.id, r.source, d.source))
		case r.seq != d.seq || r.uuid != k.uuid || r.shard != k.shard:
			problems = append(problems, fmt.Sprintf("%s: seq_no %d of %s/%d, want %d of %s/%d", k.id, r.seq, r.uuid, r.shard, d.seq, k.uuid, k.shard))
		}
	}
	for k := range got {
		if _, ok := wantRows[k]; !ok {
			problems = append(problems, fmt.Sprintf("extra row %s (routing %q)", k[0], k[1]))
		}
	}
	wrong = len(problems)
	sort.Strings(problems)
	if len(problems) > 15 {
		problems = append(problems[:15], "…")
	}
	return strings.Join(problems, "\n"), wrong, len(want)
}

// waitPostgresMirror waits until the table equals the index.
func waitPostgresMirror(tb testing.TB, src backend, pool *pgxpool.Pool, index, table string, timeout time.Duration) (diff string, wrong, docs int) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		diff, wrong, docs = diffPostgres(tb, src, pool, index, table)
		if diff == "" || time.Now().After(deadline) {
			return diff, wrong, docs
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestReliability_PostgresSink: the relay binary (with --deletes) and 3
// `consume --sink postgres` processes keep a PostgreSQL table equal to an
// index while 4 writers index, update and delete documents with custom
// routing; consumer processes and the relay are SIGKILLed at random and
// restarted, and PostgreSQL itself is killed (SIGKILL, recovering from its WAL) and
// started again mid-run. Afterwards the table equals the index (every
// document's row with its source, seq_no, uuid and shard; no other row),
// nothing is pending or dead-lettered, the applied position is recorded
// in escf__applied, and escf__applied_slots names the stream's last entry.
func TestReliability_PostgresSink(t *testing.T) {
	t.Parallel()
	d, kills, relayKills, pgRestarts := 10*time.Second, 12, 4, 2
	if testing.Short() {
		d, kills, relayKills, pgRestarts = 4*time.Second, 4, 2, 1
	}
	src := esCluster(t, esemu.Config{Nodes: 2, OutOfOrder: true})
	ix := src.Index("orders")
	createIndex(t, src, ix, 3, 1)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	pg := pgtest.Start(t)
	pool := pg.Pool(t, "postgres")
	relayCmd := relayArgs(src, srv.URL(), "pgshop", ix, "--deletes", "--delete-scan-interval", "200ms", "--delete-scan-budget", "1")
	relayP := startBinary(t, relayCmd...)
	f := binaryFeed(t, srv, "pgshop")
	procs := make([]*proc, 3)
	name := func(i int) string { return fmt.Sprintf("pg%d", i) }
	start := func(i int) *proc {
		return startBinary(t, postgresConsumeArgs(srv.URL(), "pgshop", "sql", name(i), pg.URL("postgres"))...)
	}
	for i := range procs {
		procs[i] = start(i)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// What the consumers running at the end said (the last lines).
			for i, p := range procs {
				lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
				t.Logf("consumer %s, last lines:\n%s", name(i), strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
	})
	stopWriters := startWriters(t, src, ix, 4, 28, true, false)
	rng := rand.New(rand.NewPCG(28, 28))
	steps := kills + relayKills + pgRestarts
	restartAt, relayAt := map[int]bool{}, map[int]bool{}
	for len(restartAt) < pgRestarts {
		restartAt[1+rng.IntN(steps-1)] = true
	}
	for len(relayAt) < relayKills {
		if k := rng.IntN(steps); !restartAt[k] {
			relayAt[k] = true
		}
	}
	interval := d / time.Duration(steps+1)
	leftPending := 0
	for k := 0; k < steps; k++ {
		time.Sleep(interval)
		if restartAt[k] {
			// PostgreSQL down for a moment: the consumers' batches wait
			// and retry; nothing is acknowledged that was not committed.
			pg.Stop()
			time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
			pg.StartAgain()
			continue
		}
		if relayAt[k] {
			relayP.kill()
			relayP = startBinary(t, relayCmd...)
			continue
		}
		i := rng.IntN(len(procs))
		procs[i].kill()
		pend, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: f.keys.Events(), Group: "sql",
			Start: "-", End: "+", Count: 100000, Consumer: name(i)}).Result()
		if err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
			err = nil // killed before any consumer made the group (a real node starts slower)
		}
		if err != nil {
			t.Fatal(err)
		}
		leftPending += len(pend)
		procs[i] = start(i)
	}
	time.Sleep(interval)
	ws := stopWriters()
	ops, _ := writerOps(ws)
	waitCaughtUp(t, src, f.store, []string{ix}, 30*time.Second)
	a := auditStream(t, src, f, []string{ix}, ws, 30*time.Second)
	waitGroupDone(t, rdb, f.keys.Events(), "sql", 60*time.Second)
	table := sink.PostgresTableName("escf_" + ix)
	diff, lost, docs := waitPostgresMirror(t, src, pool, ix, table, 30*time.Second)
	if diff != "" {
		t.Errorf("the table %s differs from the index %s:\n%s", table, ix, diff)
	}
	dead, _ := rdb.XLen(context.Background(), f.keys.Dead()).Result()
	if dead != 0 {
		t.Errorf("%d events dead-lettered: nothing should fail here", dead)
	}
	var deletesSeen int
	var lastDoc string // the last entry that writes a row
	for _, e := range entries(t, rdb, f.keys.Events()) {
		if e.Op == "delete" {
			deletesSeen++
		}
		if e.Op == redisx.OpUpsert || e.Op == redisx.OpDelete {
			lastDoc = e.StreamID
		}
	}
	if deletesSeen == 0 {
		t.Error("no delete event: the scenario did not exercise deletes")
	}
	var lead string
	err := pool.QueryRow(context.Background(), "SELECT lead FROM public.escf__applied WHERE stream = $1 AND consumer_group = 'sql'", f.keys.Events()).Scan(&lead)
	if errors.Is(err, pgx.ErrNoRows) || lead == "" {
		t.Errorf("no applied position recorded in escf__applied (%v)", err)
	} else if err != nil {
		t.Fatal(err)
	}
	// Each batch's transaction recorded what it applied: the highest
	// entry, through the kills and PostgreSQL's restarts, is the last.
	var committed string
	err = pool.QueryRow(context.Background(), "SELECT last_id FROM public.escf__applied_slots WHERE stream = $1 AND consumer_group = 'sql' "+
		"ORDER BY split_part(last_id, '-', 1)::numeric DESC, split_part(last_id, '-', 2)::numeric DESC LIMIT 1", f.keys.Events()).Scan(&committed)
	if err != nil || committed != lastDoc {
		t.Errorf("escf__applied_slots says entries up to %q were applied (%v), want the stream's last document entry %s", committed, err, lastDoc)
	}
	relayP.kill()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(os.Interrupt)
	}
	record(t, figure{Scenario: "relay and consumer SIGKILLs + PostgreSQL restarts, 3 consumers, postgres sink", Faults: kills + relayKills + pgRestarts, Entries: a.Entries, Docs: docs,
		Lost: lost + a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes; %d consumer SIGKILLs, %d relay SIGKILLs, %d PostgreSQL SIGKILL+restarts; %d entries left pending by killed consumers and redelivered; %d delete events; %d dead letters",
			ops, kills, relayKills, pgRestarts, leftPending, deletesSeen, dead)})
}

// TestBootstrap_PostgresAfterHistoryLost: a `consume --sink postgres`
// runs, stops; 4 writers go on indexing, updating and deleting (custom
// routing); the stream is trimmed to a tenth, past the group. consume
// refuses the group (history lost); consume --bootstrap, with the writers
// still writing, copies the cluster's documents into the table, deletes
// the rows the source no longer has (their deletes were trimmed), moves
// the group and follows on: the table ends exactly the index.
func TestBootstrap_PostgresAfterHistoryLost(t *testing.T) {
	c := esCluster(t, esemu.Config{Nodes: 3, OutOfOrder: true, MaxCompletionDelay: 3 * time.Millisecond})
	ix := c.Index("pgreinit")
	createIndex(t, c, ix, 3, 0)
	srv := redistest.Start(t)
	pg := pgtest.Start(t)
	pool := pg.Pool(t, "postgres")
	relayP := startBinary(t, relayArgs(c, srv.URL(), "pgreinit", ix, "--deletes", "--delete-scan-interval", "300ms", "--delete-scan-budget", "1")...)
	defer relayP.kill()
	f := binaryFeed(t, srv, "pgreinit")
	ctx := context.Background()
	consume := func(extra ...string) *proc {
		args := append([]string{"consume", "--redis", srv.URL(), "--feed", "pgreinit", "--group", "sql",
			"--sink", "postgres", "--postgres-url", pg.URL("postgres"), "--workers", "64", "--log-level", "warn", "--wait-for-feed", "1m"}, extra...)
		return startBinary(t, args...)
	}
	stopWriters := startWriters(t, c, ix, 4, 78, true, true)
	m := consume()
	waitStream(t, f, 300, time.Minute)
	waitGroupRead(t, f.rdb, f.keys.Events(), "sql", 300, time.Minute) // the table exists once the consumer applied a batch
	stopGracefully(t, m, "the postgres consumer")
	table := sink.PostgresTableName("escf_" + ix)
	before := len(pgRows(t, pool, table))

	target := f.rdb.XLen(ctx, f.keys.Events()).Val() + 400
	waitStream(t, f, target, 2*time.Minute)
	n := f.rdb.XLen(ctx, f.keys.Events()).Val()
	f.rdb.XTrimMaxLen(ctx, f.keys.Events(), n/10)
	refused := consume()
	if code := waitExit(t, refused, 30*time.Second); code != 1 || !strings.Contains(refused.out.String(), "history lost") {
		t.Fatalf("consume of the trimmed group exited %d, want 1 with history lost:\n%s", code, refused.out)
	}

	b := consume(append([]string{"--bootstrap"}, inspect(c).cliArgs()...)...)
	time.Sleep(3 * time.Second) // writers go on during and after the copy
	ws := stopWriters()
	ops, failed := writerOps(ws)
	waitCaughtUp(t, c, f.store, []string{ix}, time.Minute)
	waitGroupDone(t, f.rdb, f.keys.Events(), "sql", 2*time.Minute)
	diff, _, docs := waitPostgresMirror(t, c, pool, ix, table, 30*time.Second)
	stopGracefully(t, b, "consume --bootstrap")
	if diff != "" {
		t.Fatalf("the re-initialized table differs from the index:\n%s\nconsume --bootstrap:\n%s", diff, tail(b.out.String(), 30))
	}
	_, g, _, err := redisx.ReadGroup(ctx, f.rdb, f.keys.Events(), "sql")
	if err != nil || g.HistoryLost() {
		t.Fatalf("group after the bootstrap: %+v, %v; want healthy", g, err)
	}
	var lead string
	if err := pool.QueryRow(ctx, "SELECT lead FROM public.escf__applied WHERE stream = $1 AND consumer_group = 'sql'", f.keys.Events()).Scan(&lead); err != nil || lead == "" {
		t.Fatalf("applied position after the bootstrap: %q, %v", lead, err)
	}
	t.Logf("%d writes (%d failed or unanswered); %d rows when the consumer stopped; stream trimmed from %d to %d entries; the table holds exactly the index's %d documents",
		ops, failed, before, n, n/10, docs)
	record(t, figure{Scenario: "consume --bootstrap re-initializes a postgres table after the stream was trimmed to a tenth past it, 4 writers on",
		Faults: 1, Entries: int(n), Docs: docs,
		Note: fmt.Sprintf("%d writes; the consumer refused first (history lost), exact after --bootstrap", ops)})
}
