package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// Real failovers (issue #14): clusters of real nodes of ESCF_TEST_ENGINE,
// one JVM each, whose nodes are killed (SIGKILL), stopped (SIGSTOP) and
// started again, while writers index, update and delete. The audit has no
// op history on a real cluster: it judges the stream by the documents the
// cluster holds at the end and by what the cluster acknowledged to the
// writers (auditAcks).

// fastFaultDetection lets a three-node cluster notice a paused node in
// about 5 s instead of 30 s (both engines' defaults: checks every 1 s,
// 10 s timeout, 3 tries).
var fastFaultDetection = map[string]string{
	"cluster.fault_detection.follower_check.interval":    "1s",
	"cluster.fault_detection.follower_check.timeout":     "2s",
	"cluster.fault_detection.follower_check.retry_count": "2",
	"cluster.fault_detection.leader_check.interval":      "1s",
	"cluster.fault_detection.leader_check.timeout":       "2s",
	"cluster.fault_detection.leader_check.retry_count":   "2",
}

// esConfig and cliArgs name every node, so the relay fails over to the
// nodes that are up.
func (e *engineBackend) esConfig() es.Config { return es.Config{URLs: e.Cluster.URLs()} }

func (e *engineBackend) cliArgs() []string {
	var args []string
	for _, u := range e.Cluster.URLs() {
		args = append(args, "--es", u)
	}
	return args
}

// waitIndexGreen waits until every copy of the index is started, asked
// through a running node.
func (e *engineBackend) waitIndexGreen(tb testing.TB, index string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for i := 0; i < e.Nodes(); i++ {
			if !e.Running(i) {
				continue
			}
			st, b, err := tryDo("GET", fmt.Sprintf("%s/_cluster/health/%s?wait_for_status=green&wait_for_nodes=%d&timeout=2s", e.NodeURL(i), index, e.Nodes()), "")
			if err == nil && st == 200 && strings.Contains(string(b), `"timed_out":false`) {
				return
			}
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not green with %d nodes within %s", index, e.Nodes(), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nodeWithMostPrimaries is the running node holding most of the index's
// started primaries.
func (e *engineBackend) nodeWithMostPrimaries(tb testing.TB, index string) int {
	tb.Helper()
	via := -1
	for i := 0; i < e.Nodes(); i++ {
		if e.Running(i) {
			via = i
			break
		}
	}
	copies, err := e.Shards(context.Background(), via, index)
	if err != nil {
		tb.Fatal(err)
	}
	count := make([]int, e.Nodes())
	for _, cp := range copies {
		if cp.Primary && cp.State == "STARTED" && cp.Node >= 0 {
			count[cp.Node]++
		}
	}
	best := 0
	for i := range count {
		if count[i] > count[best] {
			best = i
		}
	}
	return best
}

// primaryTerms sums, over the index's shards, the primary terms beyond the
// first: each is a promotion of a replica.
func (e *engineBackend) promotions(tb testing.TB, index string) int64 {
	tb.Helper()
	var r struct {
		Metadata struct {
			Indices map[string]struct {
				PrimaryTerms map[string]int64 `json:"primary_terms"`
			} `json:"indices"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(mustDo(tb, "GET", e.URL()+"/_cluster/state/metadata/"+index, ""), &r); err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, t := range r.Metadata.Indices[index].PrimaryTerms {
		n += t - 1
	}
	return n
}

// clusterNodes is the number of nodes node i sees in the cluster (-1 if it
// does not answer).
func (e *engineBackend) clusterNodes(i int) int {
	// The node's own cluster state (local=true): _cat/nodes on ES 8 and
	// later asks every node for its stats, so it hangs on the paused one.
	st, b, err := tryDo("GET", e.NodeURL(i)+"/_cluster/health?local=true", "")
	if err != nil || st != 200 {
		return -1
	}
	var h struct {
		Nodes int `json:"number_of_nodes"`
	}
	if json.Unmarshal(b, &h) != nil {
		return -1
	}
	return h.Nodes
}

// failoverKills is how many times TestRealFailover_NodesKilledAndPaused
// kills a node: 5, or ESCF_FAILOVER_KILLS (CI runs fewer on the engines
// after the first, to stay within its time).
func failoverKills(tb testing.TB) int {
	v := os.Getenv("ESCF_FAILOVER_KILLS")
	if v == "" {
		return 5
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("ESCF_FAILOVER_KILLS=%q: want a whole number of kills, 1 or more", v)
	}
	return n
}

// TestRealFailover_NodesKilledAndPaused: three real nodes, an index of 3
// shards with 1 replica; 4 writers index, update and delete (a third of
// the documents with custom routing), sending each request to a random
// node; the relay binary with --deletes talks to all three. The node
// holding most primaries is SIGKILLed 5 times (started again, the index
// green again before the next kill; during the second kill the relay is
// killed and started again too), then one is SIGSTOPped until the
// others have removed it from the cluster and SIGCONTed. The stream must
// replay to exactly the cluster's documents, with no op twice and no event
// for an op that does not exist.
func TestRealFailover_NodesKilledAndPaused(t *testing.T) {
	kills := failoverKills(t)
	c := engineCluster(t, 3, fastFaultDetection)
	ix := c.Index("failover")
	createIndex(t, c, ix, 3, 1)
	c.waitIndexGreen(t, ix, time.Minute)
	srv := redistest.Start(t)
	p := startBinary(t, relayArgs(c, srv.URL(), "failover", ix, "--deletes", "--delete-scan-interval", "500ms", "--delete-scan-budget", "1")...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay:\n%s", tail(p.out.String(), 60))
		}
	})
	stopWriters := startWriters(t, c, ix, 4, 31, true, true)
	ctx := context.Background()

	for i := 0; i < kills; i++ {
		time.Sleep(2 * time.Second)
		node := c.nodeWithMostPrimaries(t, ix)
		if err := c.Kill(node); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			// The relay restarted while a node is down (a rolling
			// restart): it starts on the nodes that answer.
			p.kill()
			p = startBinary(t, relayArgs(c, srv.URL(), "failover", ix, "--deletes", "--delete-scan-interval", "500ms", "--delete-scan-budget", "1")...)
		}
		time.Sleep(3 * time.Second) // writes go on against the others
		if err := c.Start(ctx, node); err != nil {
			t.Fatal(err)
		}
		c.waitIndexGreen(t, ix, 2*time.Minute)
	}

	// A node paused past the fault detection: the others remove it and
	// promote its primaries' replicas; it comes back and rejoins.
	time.Sleep(2 * time.Second)
	paused := c.nodeWithMostPrimaries(t, ix)
	other := (paused + 1) % c.Nodes()
	if err := c.Pause(paused); err != nil {
		t.Fatal(err)
	}
	removedAfter := time.Duration(-1)
	pauseStart := time.Now()
	// Fast fault detection removes it in 6 s on an idle machine; with two
	// engines' clusters on 2 cores it took 36 s in CI.
	for time.Since(pauseStart) < 2*time.Minute {
		if c.clusterNodes(other) == 2 {
			removedAfter = time.Since(pauseStart)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // writes go on without it
	if err := c.Resume(paused); err != nil {
		t.Fatal(err)
	}
	if removedAfter < 0 {
		t.Fatal("the cluster did not remove the paused node within 2 minutes: the pause was not past the fault detection")
	}
	c.waitIndexGreen(t, ix, 2*time.Minute)
	time.Sleep(2 * time.Second)
	ws := stopWriters()
	ops, failed := writerOps(ws)
	promotions := c.promotions(t, ix)

	f := binaryFeed(t, srv, "failover")
	waitCaughtUp(t, c, f.store, []string{ix}, time.Minute)
	a := auditStream(t, c, f, []string{ix}, ws, time.Minute)
	p.kill()
	if ops-failed < 500 {
		t.Fatalf("only %d of %d writes succeeded: the test did not exercise the relay", ops-failed, ops)
	}
	if promotions < int64(kills) {
		t.Fatalf("%d replica promotions for %d kills and a pause: the kills did not fail primaries over", promotions, kills)
	}
	record(t, figure{Scenario: fmt.Sprintf("%s: the primaries' node SIGKILLed ×%d and one SIGSTOPped past fault detection (3 nodes, 1 replica)", c.Engine().Name, kills),
		Faults: kills + 1, Entries: a.Entries, Docs: a.Docs, Lost: a.Lost, Duplicated: a.Duplicated, Wrong: a.Wrong,
		Note: fmt.Sprintf("%d writes (%d without an answer or failed), %d replica promotions; paused node removed after %s; %d delete events; %d events of unanswered writes",
			ops, failed, promotions, removedAfter.Round(100*time.Millisecond), a.Deletes, a.Unconfirmed)})
}

// TestRealFailover_UnreplicatedWritesRolledBack tries to make a real
// failover roll back writes the primary applied: one shard with a replica
// on each of the two other nodes; both replica nodes are SIGSTOPped, and
// writes go to the primary (wait_for_active_shards=1): the primary applies
// them, cannot replicate them, so never acknowledges them, and its global
// checkpoint stays behind. Then the primary's node is SIGKILLed and the
// replicas' nodes resumed: they elect a master, promote a replica, and the
// primary's unreplicated ops are gone, on its node too once it is started
// again. The feed must carry no event for them: the stream replays to the
// cluster's documents, the old values included.
func TestRealFailover_UnreplicatedWritesRolledBack(t *testing.T) {
	c := engineCluster(t, 3, fastFaultDetection)
	ix := c.Index("rollback")
	mustDo(t, "PUT", c.URL()+"/"+ix, `{"settings":{"number_of_shards":1,"number_of_replicas":2}}`)
	c.waitIndexGreen(t, ix, time.Minute)
	for i := 0; i < 5; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.URL(), ix, i), fmt.Sprintf(`{"v":1,"i":%d}`, i))
	}
	srv := redistest.Start(t)
	f := startRelay(t, c, srv.URL(), "rollback", []string{ix}, nil)
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)

	primary := c.nodeWithMostPrimaries(t, ix)
	var replicas []int
	for i := 0; i < c.Nodes(); i++ {
		if i != primary {
			replicas = append(replicas, i)
		}
	}
	for _, r := range replicas {
		if err := c.Pause(r); err != nil {
			t.Fatal(err)
		}
	}
	// Writes the primary applies and cannot replicate: updates of d0..d2
	// and new documents n0..n2, all with the fields the mapping has (a new
	// field would wait for a mapping update, which needs the master). No
	// answer is expected.
	ids := []string{"d0", "d1", "d2", "n0", "n1", "n2"}
	client := &http.Client{Timeout: 4 * time.Second}
	var wg sync.WaitGroup
	answered := 0
	var mu sync.Mutex
	for _, id := range ids {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/%s/_doc/%s?wait_for_active_shards=1", c.NodeURL(primary), ix, id),
				strings.NewReader(fmt.Sprintf(`{"v":2,"i":%d}`, 10+len(id)*int(id[1]-'0'))))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode < 300 {
					mu.Lock()
					answered++
					mu.Unlock()
				}
			}
		}(id)
	}
	wg.Wait()
	// What the primary applied: a realtime get on its own copy sees it.
	applied := map[string]bool{}
	for _, id := range ids {
		st, b, err := tryDo("GET", fmt.Sprintf("%s/%s/_doc/%s?preference=_only_local&realtime=true", c.NodeURL(primary), ix, id), "")
		applied[id] = err == nil && st == 200 && strings.Contains(string(b), `"v":2`)
	}
	time.Sleep(2 * time.Second) // the relay polls the primary meanwhile

	if err := c.Kill(primary); err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas {
		if err := c.Resume(r); err != nil {
			t.Fatal(err)
		}
	}
	// The two resumed nodes form the cluster and promote a replica.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, b, err := tryDo("GET", fmt.Sprintf("%s/_cluster/health/%s?wait_for_active_shards=1&timeout=2s", c.NodeURL(replicas[0]), ix), "")
		if err == nil && st == 200 && !strings.Contains(string(b), `"status":"red"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no primary for %s two minutes after the failover: %s", ix, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.Start(context.Background(), primary); err != nil {
		t.Fatal(err)
	}
	c.waitIndexGreen(t, ix, 2*time.Minute)
	waitCaughtUp(t, c, f.store, []string{ix}, time.Minute)
	evs := waitMirror(t, c, f, ix, time.Minute) // the stream replays to the cluster's documents
	docs := clusterDocs(t, c, ix)
	uuid := indexUUID(t, c, ix)
	// A write the primary applied and the cluster no longer holds was
	// rolled back; an event with its value is a phantom.
	rolledBack, kept, phantoms := 0, 0, 0
	for _, id := range ids {
		if !applied[id] {
			continue
		}
		d, ok := docs[docKey{uuid, 0, id}]
		if ok && strings.Contains(d.source, `"v":2`) {
			kept++ // it reached the replicas after all (see below)
			continue
		}
		rolledBack++
		for _, e := range evs {
			if e.Op == redisx.OpUpsert && e.ID == id && strings.Contains(string(e.Source), `"v":2`) {
				phantoms++
			}
		}
	}
	nApplied := 0
	for _, ok := range applied {
		if ok {
			nApplied++
		}
	}
	st, err := f.store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cp := st.Checkpoints[checkpoint.ShardID{IndexUUID: uuid, Shard: 0}]
	t.Logf("%s: %d of %d writes applied on the cut-off primary (%d answered); of those %d rolled back by the failover and %d kept (replicated when the paused replicas resumed); %d events for rolled-back writes; checkpoint %d",
		c.Engine().Name, nApplied, len(ids), answered, rolledBack, kept, phantoms, cp)
	if phantoms != 0 {
		t.Fatalf("%d events for writes the failover rolled back", phantoms)
	}
	rollbackHappened := "no"
	if rolledBack > 0 {
		rollbackHappened = "yes"
	}
	record(t, figure{Scenario: fmt.Sprintf("%s: writes applied by a primary cut off from its replicas (SIGSTOP), then the primary SIGKILLed", c.Engine().Name),
		Faults: 1, Entries: len(evs), Docs: len(docs), Wrong: phantoms,
		Note: fmt.Sprintf("%d of %d writes applied on the primary, %d answered; rolled back: %s (%d; %d kept); %d events for them",
			nApplied, len(ids), answered, rollbackHappened, rolledBack, kept, phantoms)})
}

// TestRealFailover_StalePrimaryPromoted rolls back acknowledged writes for
// real, the one way a cluster does: one shard with one replica; the
// replica's node is killed, the primary acknowledges more writes alone,
// then its node is killed too; the stale replica is started and forced to
// be the primary (allocate_stale_primary with accept_data_loss, what an
// operator does when the last good copy's disk is gone). Its history lacks
// the writes the feed delivered, and new writes take their seq nos again.
// The relay must not go on as if nothing happened (it would skip the new
// writes at reused seq nos for ever): it stops with an error that names the
// shard and says to resync, and resync gives a stream that replays to the
// cluster's documents.
func TestRealFailover_StalePrimaryPromoted(t *testing.T) {
	c := engineCluster(t, 3, fastFaultDetection)
	ix := c.Index("stale")
	// The copies live on n0 and n1 only: no third copy is built while a
	// node is away, so the primary's last writes exist on one node.
	mustDo(t, "PUT", c.URL()+"/"+ix, `{"settings":{"number_of_shards":1,"number_of_replicas":1,"index.routing.allocation.include._name":"n0,n1"}}`)
	c.waitIndexGreen(t, ix, time.Minute)
	for i := 0; i < 5; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.URL(), ix, i), fmt.Sprintf(`{"v":1,"i":%d}`, i))
	}
	copies, err := c.Shards(context.Background(), 0, ix)
	if err != nil {
		t.Fatal(err)
	}
	primary, replica := -1, -1
	for _, cp := range copies {
		if cp.Primary {
			primary = cp.Node
		} else {
			replica = cp.Node
		}
	}
	third := 3 - primary - replica
	srv := redistest.Start(t)
	p := startBinary(t, relayArgs(c, srv.URL(), "stale", ix)...)
	f := binaryFeed(t, srv, "stale")
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second)

	// The replica's node dies; the primary writes on alone (acknowledged:
	// the master takes the replica out of the in-sync set).
	if err := c.Kill(replica); err != nil {
		t.Fatal(err)
	}
	for i := 5; i < 10; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/d%d", c.NodeURL(primary), ix, i), fmt.Sprintf(`{"v":1,"i":%d}`, i))
	}
	waitCaughtUp(t, c, f.store, []string{ix}, 30*time.Second) // the feed delivered d5..d9
	if err := c.Kill(primary); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background(), replica); err != nil {
		t.Fatal(err)
	}
	// Only the stale copy is left: force it.
	body := fmt.Sprintf(`{"commands":[{"allocate_stale_primary":{"index":%q,"shard":0,"node":%q,"accept_data_loss":true}}]}`, ix, c.NodeName(replica))
	mustDo(t, "POST", c.NodeURL(third)+"/_cluster/reroute", body)
	deadline := time.Now().Add(time.Minute)
	for {
		st, b, err := tryDo("GET", fmt.Sprintf("%s/_cluster/health/%s?timeout=1s", c.NodeURL(third), ix), "")
		if err == nil && st == 200 && !strings.Contains(string(b), `"status":"red"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stale copy did not become primary: %s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// New writes take the rolled-back seq nos again.
	for i := 0; i < 3; i++ {
		mustDo(t, "PUT", fmt.Sprintf("%s/%s/_doc/z%d", c.NodeURL(third), ix, i), fmt.Sprintf(`{"v":3,"i":%d}`, i))
	}
	if err := c.Start(context.Background(), primary); err != nil {
		t.Fatal(err)
	}
	exit := waitExit(t, p, time.Minute)
	out := p.out.String()
	if exit != 1 || !strings.Contains(out, "history") || !strings.Contains(out, "resync") {
		t.Fatalf("the relay exited %d; want 1 with an error about the shard's new history and resync:\n%s", exit, tail(out, 30))
	}
	t.Logf("the relay stopped: %s", lastLine(out))

	// resync: a consumer that reads the whole stream with the snapshot rule
	// (at snapshot_end it drops what the snapshot did not hold) mirrors the
	// cluster again: d5..d9 gone, z0..z2 there.
	r := startBinary(t, append([]string{"resync"}, relayArgs(c, srv.URL(), "stale", ix)[1:]...)...)
	t.Cleanup(r.kill)
	cn := &consumer{docs: map[docKey]doc{}}
	deadline = time.Now().Add(time.Minute)
	for {
		cn.poll(t, f)
		diff := diffDocs(clusterDocs(t, c, ix), cn.docs)
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after resync, the consumer's mirror differs from the cluster:\n%s", diff)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("after resync the consumer mirrors the cluster's %d documents", len(cn.docs))
}
