package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of redis-server processes on loopback.
type Cluster struct {
	// Nodes are every node, in the order they were started (the first
	// Masters of them were made masters at creation; failovers change
	// roles since: ask MasterOf and ReplicaOf).
	Nodes []*Server

	tb   testing.TB
	mu   sync.Mutex
	down map[*Server]bool // killed through the Cluster
}

// ClusterOptions shape a cluster.
type ClusterOptions struct {
	// Masters is the number of masters. Default 3 (the fewest
	// `redis-cli --cluster create` accepts).
	Masters int
	// Replicas is the number of replicas of each master. Default 0.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a master may be
	// unreachable before its replica takes over. Default 1s.
	NodeTimeout time.Duration
	// Args are extra redis-server arguments for every node.
	Args []string
}

// StartCluster starts Masters×(1+Replicas) nodes with --cluster-enabled
// yes, joins them with `redis-cli --cluster create`, and waits until
// every node reports cluster_state:ok and every replica is in sync. The
// nodes are killed and their directories removed in tb.Cleanup.
func StartCluster(tb testing.TB, opts ...ClusterOptions) *Cluster {
	tb.Helper()
	var o ClusterOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = time.Second
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redis-cli not found on PATH: install it with `apt-get install -y redis-server` (make test does this)")
	}
	c := &Cluster{tb: tb, down: map[*Server]bool{}}
	n := o.Masters * (1 + o.Replicas)
	var args []string
	for range n {
		port := clusterPort(tb)
		s := startWith(tb, port, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
			// A replica may always take over, however long its link was down.
			"--cluster-replica-validity-factor", "0"}, o.Args...), nil, nil)
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	cmd := exec.Command(cli, append([]string{"--cluster", "create"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		tb.Fatalf("Redis Cluster did not become healthy: %v", err)
	}
	return c
}

// clusterPort finds a free port whose cluster bus port (+10000) is free
// and valid too.
func clusterPort(tb testing.TB) int {
	tb.Helper()
	for range 200 {
		p := freePort(tb)
		if p+10000 > 65535 {
			// Ephemeral ports are mostly too high: try the range below.
			p = 20000 + p%30000
		}
		ok := true
		for _, q := range []int{p, p + 10000} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(q)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p
		}
	}
	tb.Fatalf("no free port pair (port, port+10000) for a cluster node")
	return 0
}

// URL is redis-cluster://host:port,host:port,… listing every node.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return "redis-cluster://" + strings.Join(addrs, ",")
}

// Addrs are the nodes' host:port.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Client returns a cluster client of every node that reads the slot map
// again every second while used (so it finds a promoted replica within
// about a second), closed in tb.Cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: time.Second})
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// alive reports whether the node was not killed through the Cluster (safe
// to call from any goroutine, e.g. a client's dialer).
func (c *Cluster) alive(s *Server) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.down[s]
}

// Kill SIGKILLs one node.
func (c *Cluster) Kill(s *Server) {
	c.mu.Lock()
	c.down[s] = true
	c.mu.Unlock()
	s.Stop()
}

// StartAgain starts a node Kill stopped, on its port, directory and
// nodes.conf: it rejoins the cluster (a killed master whose replica took
// over comes back as that replica's replica), and waits until the cluster
// is healthy.
func (c *Cluster) StartAgain(tb testing.TB, s *Server) {
	tb.Helper()
	s.StartAgain()
	c.mu.Lock()
	delete(c.down, s)
	c.mu.Unlock()
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		tb.Fatalf("after %s came back: %v", s.Addr, err)
	}
}

// nodeClient is a short-lived plain client of one node.
func nodeClient(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second})
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr, master string // master: the master's id for a replica, "-" for a master
	flags            []string
	slots            [][2]int
}

func (n node) has(flag string) bool {
	for _, f := range n.flags {
		if f == flag {
			return true
		}
	}
	return false
}

// nodes reads CLUSTER NODES from the first live node that answers.
func (c *Cluster) nodes(ctx context.Context) ([]node, error) {
	var err error
	for _, s := range c.Nodes {
		if !c.alive(s) {
			continue
		}
		rc := nodeClient(s)
		var txt string
		txt, err = rc.ClusterNodes(ctx).Result()
		rc.Close()
		if err != nil {
			continue
		}
		var out []node
		for _, line := range strings.Split(strings.TrimSpace(txt), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			n := node{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
			for _, r := range f[8:] {
				if strings.HasPrefix(r, "[") {
					continue // a slot in migration
				}
				lo, hi, found := strings.Cut(r, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if found {
					b, _ = strconv.Atoi(hi)
				}
				n.slots = append(n.slots, [2]int{a, b})
			}
			out = append(out, n)
		}
		return out, nil
	}
	if err == nil {
		err = fmt.Errorf("no node is running")
	}
	return nil, err
}

func (c *Cluster) server(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Slot is the hash slot of a key (CRC16 of its hash tag, mod 16384).
func (c *Cluster) Slot(tb testing.TB, key string) int {
	tb.Helper()
	for _, s := range c.Nodes {
		if !c.alive(s) {
			continue
		}
		rc := nodeClient(s)
		n, err := rc.ClusterKeySlot(context.Background(), key).Result()
		rc.Close()
		if err == nil {
			return int(n)
		}
	}
	tb.Fatalf("CLUSTER KEYSLOT %s: no node answered", key)
	return 0
}

// MasterOf returns the node that serves the slot of key as master, as
// the live nodes see it now.
func (c *Cluster) MasterOf(tb testing.TB, key string) *Server {
	tb.Helper()
	slot := c.Slot(tb, key)
	ns, err := c.nodes(context.Background())
	if err != nil {
		tb.Fatalf("CLUSTER NODES: %v", err)
	}
	for _, n := range ns {
		if !n.has("master") || n.has("fail") {
			continue
		}
		for _, r := range n.slots {
			if slot >= r[0] && slot <= r[1] {
				return c.server(n.addr)
			}
		}
	}
	tb.Fatalf("no live master serves slot %d of %s", slot, key)
	return nil
}

// ReplicaOf returns a live replica of master (nil when it has none).
func (c *Cluster) ReplicaOf(tb testing.TB, master *Server) *Server {
	tb.Helper()
	ns, err := c.nodes(context.Background())
	if err != nil {
		tb.Fatalf("CLUSTER NODES: %v", err)
	}
	var id string
	for _, n := range ns {
		if n.addr == master.Addr {
			id = n.id
		}
	}
	for _, n := range ns {
		if n.master == id && !n.has("fail") {
			if s := c.server(n.addr); s != nil && c.alive(s) {
				return s
			}
		}
	}
	return nil
}

// KillMaster SIGKILLs the master serving key's slot and waits until its
// replica took over (after cluster-node-timeout) and the cluster is
// healthy again. It returns the killed node and the new master.
func (c *Cluster) KillMaster(tb testing.TB, key string) (killed, promoted *Server) {
	tb.Helper()
	killed = c.MasterOf(tb, key)
	if c.ReplicaOf(tb, killed) == nil {
		tb.Fatalf("master %s of %s has no replica to take over", killed.Addr, key)
	}
	c.Kill(killed)
	return killed, c.waitNewMaster(tb, key, killed)
}

// KillMasterCutOff is KillMaster after the master's link to its replica
// was cut window earlier (the replica's masterauth made wrong so that it
// cannot reconnect, then CLIENT KILL TYPE replica on the master): what the
// master acknowledged in that window never reaches the replica, and the
// failover loses it, as after a network partition between them.
func (c *Cluster) KillMasterCutOff(tb testing.TB, key string, window time.Duration) (killed, promoted *Server) {
	tb.Helper()
	killed = c.MasterOf(tb, key)
	if c.ReplicaOf(tb, killed) == nil {
		tb.Fatalf("master %s of %s has no replica to take over", killed.Addr, key)
	}
	ctx := context.Background()
	replica := c.ReplicaOf(tb, killed)
	rc := nodeClient(replica)
	defer rc.Close()
	if err := rc.ConfigSet(ctx, "masterauth", "cut-off-by-the-test").Err(); err != nil {
		tb.Fatalf("CONFIG SET masterauth on %s: %v", replica.Addr, err)
	}
	mc := nodeClient(killed)
	err := mc.ClientKillByFilter(ctx, "TYPE", "replica").Err()
	mc.Close()
	if err != nil {
		tb.Fatalf("CLIENT KILL TYPE replica on %s: %v", killed.Addr, err)
	}
	time.Sleep(window)
	c.Kill(killed)
	promoted = c.waitNewMasterOf(tb, key, killed, false)
	if err := rc.ConfigSet(ctx, "masterauth", "").Err(); err != nil {
		tb.Fatalf("CONFIG SET masterauth on %s: %v", replica.Addr, err)
	}
	return killed, promoted
}

// Failover makes the replica of the master serving key's slot take over
// gracefully (CLUSTER FAILOVER on the replica: no acknowledged write is
// lost) and waits until it did. It returns the new master.
func (c *Cluster) Failover(tb testing.TB, key string) *Server {
	tb.Helper()
	old := c.MasterOf(tb, key)
	r := c.ReplicaOf(tb, old)
	if r == nil {
		tb.Fatalf("master %s of %s has no replica to take over", old.Addr, key)
	}
	rc := nodeClient(r)
	defer rc.Close()
	if err := rc.ClusterFailover(context.Background()).Err(); err != nil {
		tb.Fatalf("CLUSTER FAILOVER on %s: %v", r.Addr, err)
	}
	return c.waitNewMaster(tb, key, old)
}

func (c *Cluster) waitNewMaster(tb testing.TB, key string, old *Server) *Server {
	tb.Helper()
	return c.waitNewMasterOf(tb, key, old, true)
}

// waitNewMasterOf waits until a node other than old serves key's slot as
// master, and with healthy until the cluster is healthy.
func (c *Cluster) waitNewMasterOf(tb testing.TB, key string, old *Server, healthy bool) *Server {
	tb.Helper()
	slot := c.Slot(tb, key)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ns, err := c.nodes(context.Background()); err == nil {
			for _, n := range ns {
				if !n.has("master") || n.has("fail") || n.addr == old.Addr {
					continue
				}
				for _, r := range n.slots {
					if slot >= r[0] && slot <= r[1] {
						if !healthy {
							return c.server(n.addr)
						}
						if err := c.WaitHealthy(20 * time.Second); err != nil {
							tb.Fatalf("after the failover of %s: %v", old.Addr, err)
						}
						return c.server(n.addr)
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("no replica took over slot %d of %s from %s within 30s", slot, key, old.Addr)
	return nil
}

// WaitHealthy waits until every live node reports cluster_state:ok and
// every live replica's link to its master is up.
func (c *Cluster) WaitHealthy(d time.Duration) error {
	deadline := time.Now().Add(d)
	var why string
	for time.Now().Before(deadline) {
		why = c.unhealthy()
		if why == "" {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("after %s: %s", d, why)
}

// unhealthy says what is not ready yet ("" when all is).
func (c *Cluster) unhealthy() string {
	ctx := context.Background()
	for _, s := range c.Nodes {
		if !c.alive(s) {
			continue
		}
		rc := nodeClient(s)
		info, err := rc.ClusterInfo(ctx).Result()
		if err != nil {
			rc.Close()
			return fmt.Sprintf("%s: CLUSTER INFO: %v", s.Addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			rc.Close()
			return fmt.Sprintf("%s: not cluster_state:ok", s.Addr)
		}
		repl, err := rc.Info(ctx, "replication").Result()
		rc.Close()
		if err != nil {
			return fmt.Sprintf("%s: INFO replication: %v", s.Addr, err)
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Sprintf("%s: replica not in sync with its master", s.Addr)
		}
	}
	return ""
}

// MasterAddr is the address of the live master serving key's slot, as the
// live nodes see it now (for a test's own dialer; MasterOf fails the test
// instead of returning an error).
func (c *Cluster) MasterAddr(ctx context.Context, key string) (string, error) {
	ns, err := c.nodes(ctx)
	if err != nil {
		return "", err
	}
	var slot int
	for _, s := range c.Nodes {
		if c.alive(s) {
			rc := nodeClient(s)
			n, kerr := rc.ClusterKeySlot(ctx, key).Result()
			rc.Close()
			if kerr == nil {
				slot = int(n)
				break
			}
		}
	}
	for _, n := range ns {
		if !n.has("master") || n.has("fail") || n.has("fail?") {
			continue
		}
		for _, r := range n.slots {
			if slot >= r[0] && slot <= r[1] {
				// The view may be stale (a killed master started again is
				// a replica now): ask the node itself.
				s := c.server(n.addr)
				if s == nil || !c.alive(s) {
					return "", fmt.Errorf("master %s of slot %d is down", n.addr, slot)
				}
				nc := nodeClient(s)
				info, err := nc.Info(ctx, "replication").Result()
				nc.Close()
				if err != nil || !strings.Contains(info, "role:master") {
					return "", fmt.Errorf("%s does not say it is a master yet (%v)", n.addr, err)
				}
				return n.addr, nil
			}
		}
	}
	return "", fmt.Errorf("no live master serves slot %d of %s", slot, key)
}

// SlotClient returns a plain client that talks to whichever node is the
// master of key's slot when it connects (after a failover, its next
// connection goes to the promoted replica): for tests that read one
// feed's keys (one hash tag, one slot) with helpers taking a
// *redis.Client. Closed in tb.Cleanup.
func (c *Cluster) SlotClient(tb testing.TB, key string) *redis.Client {
	tb.Helper()
	rc := redis.NewClient(&redis.Options{Addr: "master-of-" + key, DialTimeout: time.Second,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			addr, err := c.MasterAddr(ctx, key)
			if err != nil {
				return nil, err
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	tb.Cleanup(func() { rc.Close() })
	return rc
}
