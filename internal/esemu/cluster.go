package esemu

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultFlavor                       = FlavorES9
	DefaultNodes                        = 1
	DefaultAddr                         = "127.0.0.1:0"
	DefaultClusterName                  = "esemu"
	DefaultMaxCompletionDelay           = 2 * time.Millisecond
	DefaultGlobalCheckpointSyncInterval = 30 * time.Second
	DefaultNodeLeftDelay                = time.Minute
)

// Config configures an emulated cluster. The zero value is a one-node ES 9
// cluster over plain HTTP on a free loopback port, without auth.
type Config struct {
	// Flavor is the product and version to answer as. Default FlavorES9.
	Flavor Flavor
	// Nodes is the number of data nodes. Default 1.
	Nodes int
	// Addr is the listen address. Default "127.0.0.1:0" (a free port).
	Addr string
	// ClusterName is reported by GET / and _cluster/health. Default "esemu".
	ClusterName string
	// TLS serves HTTPS with a certificate signed by a fresh self-signed CA
	// (see Cluster.CACertPEM). Default false.
	TLS bool
	// Certificate, with TLS, is the server certificate to serve instead of
	// a fresh one (tests use it for expired or wrong-host certificates);
	// CACertPEM then returns nil. Default: none.
	Certificate *tls.Certificate
	// ClientCAPEM, with TLS, makes the server require a client certificate
	// that one of these CAs (PEM) signed (tls.RequireAndVerifyClientCert).
	// Default: no client certificate asked for.
	ClientCAPEM []byte
	// Version overrides the version.number GET / reports, e.g. "7.9.3" to
	// pretend to be too old, or "7.10.2" for an OpenSearch flavor in
	// compatibility mode (compatibility.override_main_response_version:
	// version.distribution is then left out, as OpenSearch does). It
	// changes nothing else. Default: the flavor's version.
	Version string
	// Users enables basic auth: user name -> password. Default: no auth.
	Users map[string]string
	// APIKeys enables ES API keys (Authorization: ApiKey base64(id:key)):
	// id -> key. Ignored by OpenSearch flavors. Default: none.
	APIKeys map[string]string
	// OutOfOrder delays the completion of every write batch on each copy by a
	// random duration up to MaxCompletionDelay, so concurrent writes finish
	// out of sequence-number order. Default false.
	OutOfOrder bool
	// MaxCompletionDelay bounds the random delays of OutOfOrder. Default 2ms.
	MaxCompletionDelay time.Duration
	// GlobalCheckpointSyncInterval is how often replicas learn the primary's
	// global checkpoint besides the writes they receive (ES:
	// index.global_checkpoint_sync.interval). Default 30s.
	GlobalCheckpointSyncInterval time.Duration
	// NodeLeftDelay is how long a replica of a dead node waits before it is
	// allocated to another node (ES: index.unassigned.node_left.delayed_timeout).
	// Negative: never reallocate. Default 1m.
	NodeLeftDelay time.Duration
	// Seed seeds the random choices (delays, copy choice, promoted replica).
	// Default 0: seeded from the clock.
	Seed int64
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	if c.Flavor != "" {
		if _, err := ParseFlavor(string(c.Flavor)); err != nil {
			return fmt.Errorf("esemu config Flavor: %w", err)
		}
	}
	if c.Nodes < 0 || c.Nodes > 64 {
		return fmt.Errorf("esemu config Nodes = %d: want 1..64", c.Nodes)
	}
	if c.MaxCompletionDelay < 0 {
		return fmt.Errorf("esemu config MaxCompletionDelay = %s: want >= 0", c.MaxCompletionDelay)
	}
	if c.GlobalCheckpointSyncInterval < 0 {
		return fmt.Errorf("esemu config GlobalCheckpointSyncInterval = %s: want >= 0", c.GlobalCheckpointSyncInterval)
	}
	if !c.TLS && (c.Certificate != nil || len(c.ClientCAPEM) > 0) {
		return fmt.Errorf("esemu config: Certificate and ClientCAPEM need TLS: true")
	}
	if len(c.ClientCAPEM) > 0 && !x509.NewCertPool().AppendCertsFromPEM(c.ClientCAPEM) {
		return fmt.Errorf("esemu config ClientCAPEM: no PEM certificate in it")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Flavor == "" {
		c.Flavor = DefaultFlavor
	}
	c.Flavor, _ = ParseFlavor(string(c.Flavor)) // a former name such as "es-9"; Validate checked it
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	if c.MaxCompletionDelay == 0 {
		c.MaxCompletionDelay = DefaultMaxCompletionDelay
	}
	if c.GlobalCheckpointSyncInterval == 0 {
		c.GlobalCheckpointSyncInterval = DefaultGlobalCheckpointSyncInterval
	}
	if c.NodeLeftDelay == 0 {
		c.NodeLeftDelay = DefaultNodeLeftDelay
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	return c
}

type node struct {
	id     string
	name   string
	alive  bool
	diedAt time.Time
}

// Cluster is an emulated Elasticsearch/OpenSearch cluster served over HTTP.
// All methods are safe for concurrent use.
type Cluster struct {
	cfg  Config
	info flavorInfo
	uuid string

	mu          sync.RWMutex // guards the metadata below; taken before any shard lock
	nodes       []*node
	indices     map[string]*index
	templates   map[string]*indexTemplate
	dataStreams map[string]*dataStream
	lastGCPSync time.Time
	nextRefresh map[*index]time.Time

	ctxMu    sync.Mutex
	contexts map[string]*searchContext

	rngMu sync.Mutex
	rng   *rand.Rand

	faults faults

	srv    *http.Server
	ln     net.Listener
	url    string
	caPEM  []byte
	stop   chan struct{}
	done   sync.WaitGroup
	closed bool
}

// New starts an emulated cluster serving on cfg.Addr. Close it when done.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Cluster{
		cfg: cfg, info: cfg.Flavor.info().withVersion(cfg.Version), uuid: newUUID(),
		indices: map[string]*index{}, templates: map[string]*indexTemplate{},
		dataStreams: map[string]*dataStream{}, contexts: map[string]*searchContext{},
		nextRefresh: map[*index]time.Time{},
		rng:         rand.New(rand.NewSource(cfg.Seed)), stop: make(chan struct{}),
		lastGCPSync: time.Now(),
	}
	for i := 0; i < cfg.Nodes; i++ {
		c.nodes = append(c.nodes, &node{id: newUUID(), name: fmt.Sprintf("esemu-%d", i), alive: true})
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("esemu listen on %s: %w", cfg.Addr, err)
	}
	scheme := "http"
	if cfg.TLS {
		tcfg, caPEM, err := selfSignedTLS()
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("esemu TLS: %w", err)
		}
		c.caPEM = caPEM
		if cfg.Certificate != nil {
			tcfg.Certificates = []tls.Certificate{*cfg.Certificate}
			c.caPEM = nil
		}
		if len(cfg.ClientCAPEM) > 0 {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(cfg.ClientCAPEM)
			tcfg.ClientCAs = pool
			tcfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
		ln = tlsListener{tls.NewListener(ln, tcfg)}
		scheme = "https"
	}
	c.ln = ln
	c.url = fmt.Sprintf("%s://%s", scheme, ln.Addr().String())
	c.srv = &http.Server{Handler: c.handler(), ReadHeaderTimeout: 10 * time.Second}
	c.done.Add(2)
	go func() {
		defer c.done.Done()
		_ = c.srv.Serve(ln)
	}()
	go func() {
		defer c.done.Done()
		c.background()
	}()
	return c, nil
}

// URL is the cluster's base URL, e.g. "http://127.0.0.1:40123".
func (c *Cluster) URL() string { return c.url }

// Flavor is the flavor the cluster answers as.
func (c *Cluster) Flavor() Flavor { return c.cfg.Flavor }

// CACertPEM returns the PEM of the CA that signed the server certificate
// (nil without TLS).
func (c *Cluster) CACertPEM() []byte { return c.caPEM }

// Close stops serving, then stops background work. It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = c.srv.Close()
	}
	c.done.Wait()
	return err
}

// background runs scheduled refreshes, the global checkpoint sync, delayed
// replica allocation and search context expiry.
func (c *Cluster) background() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.tick(now)
		}
	}
}

func (c *Cluster) tick(now time.Time) {
	var refresh []*index
	var syncGCP bool
	c.mu.Lock()
	for _, ix := range c.indices {
		if ix.closed || ix.settings.refreshInterval <= 0 {
			continue
		}
		next, ok := c.nextRefresh[ix]
		if !ok {
			c.nextRefresh[ix] = now.Add(ix.settings.refreshInterval)
			continue
		}
		if now.After(next) {
			refresh = append(refresh, ix)
			c.nextRefresh[ix] = now.Add(ix.settings.refreshInterval)
		}
	}
	if now.Sub(c.lastGCPSync) >= c.cfg.GlobalCheckpointSyncInterval {
		c.lastGCPSync = now
		syncGCP = true
	}
	var all []*index
	if syncGCP {
		for _, ix := range c.indices {
			all = append(all, ix)
		}
	}
	c.mu.Unlock()
	for _, ix := range refresh {
		for _, s := range ix.shards {
			s.refreshAll()
		}
	}
	for _, ix := range all {
		for _, s := range ix.shards {
			s.syncGlobalCheckpoint()
		}
	}
	c.reconcileAll()
	c.expireContexts(now)
}

func (c *Cluster) completionDelay() {
	if !c.cfg.OutOfOrder || c.cfg.MaxCompletionDelay <= 0 {
		return
	}
	c.rngMu.Lock()
	d := time.Duration(c.rng.Int63n(int64(c.cfg.MaxCompletionDelay) + 1))
	c.rngMu.Unlock()
	time.Sleep(d)
}

func (c *Cluster) randIntn(n int) int {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.Intn(n)
}

// allocate picks nodes for a new shard: the primary on a live node, replicas
// on distinct other live nodes, the rest unassigned (-1). Shards are spread
// round robin starting at shard number.
func (c *Cluster) allocate(shardNum, replicas int) []int {
	var live []int
	for i, n := range c.nodes {
		if n.alive {
			live = append(live, i)
		}
	}
	out := make([]int, 1+replicas)
	for i := range out {
		out[i] = -1
		if len(live) > 0 && i < len(live) {
			out[i] = live[(shardNum+i)%len(live)]
		}
	}
	return out
}

// reconcileAll starts copies that can start (see shard.reconcile).
func (c *Cluster) reconcileAll() {
	c.mu.RLock()
	alive := make([]bool, len(c.nodes))
	movable := make([]bool, len(c.nodes))
	for i, n := range c.nodes {
		alive[i] = n.alive
		movable[i] = !n.alive && c.cfg.NodeLeftDelay >= 0 && time.Since(n.diedAt) >= c.cfg.NodeLeftDelay
	}
	var shards []*shard
	for _, ix := range c.indices {
		if !ix.closed {
			shards = append(shards, ix.shards...)
		}
	}
	c.mu.RUnlock()
	isAlive := func(n int) bool { return n >= 0 && n < len(alive) && alive[n] }
	isMovable := func(n int) bool { return n >= 0 && n < len(movable) && movable[n] }
	free := func(taken map[int]bool) int {
		for i, a := range alive {
			if a && !taken[i] {
				return i
			}
		}
		return -1
	}
	for _, s := range shards {
		s.reconcile(isAlive, isMovable, free)
	}
}

// NodeInfo describes one emulated node.
type NodeInfo struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	Name  string `json:"name"`
	Alive bool   `json:"alive"`
}

// Nodes lists the nodes.
func (c *Cluster) Nodes() []NodeInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]NodeInfo, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = NodeInfo{Index: i, ID: n.id, Name: n.name, Alive: n.alive}
	}
	return out
}

// KillNode stops node n: its copies fail, replicas of its primaries are
// promoted (primary term + 1, ops the promoted copy lacked are lost), and
// after NodeLeftDelay its replicas are rebuilt on other nodes.
func (c *Cluster) KillNode(n int) error {
	c.mu.Lock()
	if n < 0 || n >= len(c.nodes) {
		c.mu.Unlock()
		return fmt.Errorf("no node %d: the cluster has nodes 0..%d", n, len(c.nodes)-1)
	}
	if !c.nodes[n].alive {
		c.mu.Unlock()
		return fmt.Errorf("node %d is already down", n)
	}
	c.nodes[n].alive = false
	c.nodes[n].diedAt = time.Now()
	var shards []*shard
	for _, ix := range c.indices {
		shards = append(shards, ix.shards...)
	}
	c.mu.Unlock()
	for _, s := range shards {
		s.nodeDown(n, c.randIntn)
	}
	c.reconcileAll()
	return nil
}

// RestartNode brings node n back: its copies recover from their primaries,
// or become primaries again where the shard has none.
func (c *Cluster) RestartNode(n int) error {
	c.mu.Lock()
	if n < 0 || n >= len(c.nodes) {
		c.mu.Unlock()
		return fmt.Errorf("no node %d: the cluster has nodes 0..%d", n, len(c.nodes)-1)
	}
	if c.nodes[n].alive {
		c.mu.Unlock()
		return fmt.Errorf("node %d is already up", n)
	}
	c.nodes[n].alive = true
	c.mu.Unlock()
	c.reconcileAll()
	return nil
}

// SyncGlobalCheckpoints runs the global checkpoint sync now, so every replica
// learns its primary's global checkpoint.
func (c *Cluster) SyncGlobalCheckpoints() {
	c.mu.RLock()
	var shards []*shard
	for _, ix := range c.indices {
		shards = append(shards, ix.shards...)
	}
	c.mu.RUnlock()
	for _, s := range shards {
		s.syncGlobalCheckpoint()
	}
}

func (c *Cluster) lookupShard(indexName string, num int) (*shard, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ix, ok := c.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("no index %q", indexName)
	}
	if num < 0 || num >= len(ix.shards) {
		return nil, fmt.Errorf("index %q has no shard %d (it has %d)", indexName, num, len(ix.shards))
	}
	return ix.shards[num], nil
}

// Hold parks the next write batch on shard num of the index after it took
// its sequence numbers, until the returned Hold is released.
func (c *Cluster) Hold(indexName string, num int) (*Hold, error) {
	s, err := c.lookupShard(indexName, num)
	if err != nil {
		return nil, err
	}
	h := &Hold{arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.hold = h
	s.mu.Unlock()
	return h, nil
}

// CopyState is a snapshot of one shard copy.
type CopyState struct {
	Node             int   `json:"node"`
	Primary          bool  `json:"primary"`
	Started          bool  `json:"started"`
	InSync           bool  `json:"in_sync"`
	LocalCheckpoint  int64 `json:"local_checkpoint"`
	GlobalCheckpoint int64 `json:"global_checkpoint"`
	MaxSeqNo         int64 `json:"max_seq_no"`
	VisibleDocs      int   `json:"visible_docs"`
}

// ShardState is a snapshot of one shard.
type ShardState struct {
	Index            string `json:"index"`
	Shard            int    `json:"shard"`
	PrimaryTerm      int64  `json:"primary_term"`
	GlobalCheckpoint int64  `json:"global_checkpoint"`
	NextSeqNo        int64  `json:"next_seq_no"`
	// DiscardedOps counts the seq nos failovers took back: ops a promoted
	// copy had not processed (they were never acknowledged).
	DiscardedOps int64       `json:"discarded_ops"`
	Copies       []CopyState `json:"copies"`
}

// ShardState returns the state of shard num of the index.
func (c *Cluster) ShardState(indexName string, num int) (ShardState, error) {
	s, err := c.lookupShard(indexName, num)
	if err != nil {
		return ShardState{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := ShardState{Index: indexName, Shard: num, PrimaryTerm: s.term, GlobalCheckpoint: s.gcp, NextSeqNo: s.nextSeq, DiscardedOps: s.lost}
	for _, cp := range s.copies {
		st.Copies = append(st.Copies, CopyState{
			Node: cp.node, Primary: cp.primary, Started: cp.started, InSync: cp.inSync,
			LocalCheckpoint: cp.lcp, GlobalCheckpoint: cp.knownGCP, MaxSeqNo: cp.maxSeq, VisibleDocs: len(cp.visible),
		})
	}
	return st, nil
}

// Op is one operation in a copy's history, as the control API reports it.
type Op struct {
	SeqNo       int64  `json:"seq_no"`
	PrimaryTerm int64  `json:"primary_term"`
	Version     int64  `json:"version"`
	Type        string `json:"type"` // "index", "delete" or "noop"
	ID          string `json:"id,omitempty"`
	Routing     string `json:"routing,omitempty"`
	Source      []byte `json:"-"`
}

func (o *op) public() Op {
	t := [...]string{"index", "delete", "noop"}[o.kind]
	return Op{SeqNo: o.seq, PrimaryTerm: o.term, Version: o.version, Type: t, ID: o.id, Routing: o.routing, Source: o.source}
}

// History returns the ops copy number cp (0 = the first copy listed by
// ShardState) has processed, by seq no.
func (c *Cluster) History(indexName string, num, cp int) ([]Op, error) {
	return c.copyOps(indexName, num, cp, func(c *shardCopy) []*op { return c.ops })
}

// VisibleDocs returns the documents copy cp can return to a search now,
// ordered by seq no.
func (c *Cluster) VisibleDocs(indexName string, num, cp int) ([]Op, error) {
	return c.copyOps(indexName, num, cp, func(c *shardCopy) []*op { return c.bySeq })
}

// copyOps lists the non-nil entries of a seq-indexed slice of one copy.
func (c *Cluster) copyOps(indexName string, num, cp int, bySeq func(*shardCopy) []*op) ([]Op, error) {
	s, err := c.lookupShard(indexName, num)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if cp < 0 || cp >= len(s.copies) {
		return nil, fmt.Errorf("shard %d of %q has no copy %d", num, indexName, cp)
	}
	var out []Op
	for _, o := range bySeq(s.copies[cp]) {
		if o != nil {
			out = append(out, o.public())
		}
	}
	return out, nil
}

// VersionConflicts counts the 409 version conflicts the cluster answered
// (a sink applying a stale or repeated event through external versions or
// if_seq_no gets one).
func (c *Cluster) VersionConflicts() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n int64
	for _, ix := range c.indices {
		for _, s := range ix.shards {
			n += s.conflicts.Load()
		}
	}
	return n
}

// IndexNames lists the concrete indices, sorted.
func (c *Cluster) IndexNames() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	names := make([]string, 0, len(c.indices))
	for n := range c.indices {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
