package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// ShardID names one shard of one concrete index, by the index uuid (a
// re-created index with the same name is a different index).
type ShardID struct {
	IndexUUID string
	Shard     int
}

func (s ShardID) String() string { return redisx.CheckpointField(s.IndexUUID, s.Shard) }

// IndexInfo is what the feed remembers of an index it has seen.
type IndexInfo struct {
	Name      string    `json:"name"`
	Target    string    `json:"target"`
	Shards    int       `json:"shards"`
	FirstSeen time.Time `json:"first_seen"`
	// ClusterUUID is the cluster the index was seen on: an index is only
	// treated as gone (deletes for all its documents) on that cluster.
	ClusterUUID string `json:"cluster_uuid,omitempty"`
	// Layout is where the index puts documents, recorded by the relay when
	// it adopts the index, so that a consumer without access to the source
	// cluster can copy it exactly (the bulk sink creates or checks its
	// target from it). nil in records of relays before layouts, and when
	// the relay could not read it; a relay that adopts the index again
	// fills it in.
	Layout *IndexLayout `json:"layout,omitempty"`
}

// IndexLayout is what decides where an index puts a document, and what a
// copy of the index needs to put it in the same place. Two source
// documents are one if they share an _id and a shard; the shard comes from
// the routing (or the _id) through a function these fields choose. The
// JSON form is part of the feed's contract (escf:{feed}:indices).
type IndexLayout struct {
	// Shards is index.number_of_shards.
	Shards int `json:"shards"`
	// RoutingShards is routing_num_shards of the index's metadata (the
	// setting index.number_of_routing_shards, or what the engine computed
	// when it created the index).
	RoutingShards int `json:"routing_shards"`
	// RoutingPartitionSize is index.routing_partition_size; 0 and 1 mean
	// not partitioned.
	RoutingPartitionSize int `json:"routing_partition_size,omitempty"`
	// RoutingPath is index.routing_path (time series, logsdb): documents
	// are placed by these fields of their source.
	RoutingPath []string `json:"routing_path,omitempty"`
	// Engine is "elasticsearch" or "opensearch"; EngineVersion the
	// cluster's version when the relay recorded the layout.
	Engine        string `json:"engine"`
	EngineVersion string `json:"engine_version,omitempty"`
	// VersionCreated is index.version.created, the engine's id of the
	// version that created the index: with Engine, it chooses the routing
	// function (Elasticsearch 9.4+ indices route by hash modulo shards).
	VersionCreated int64 `json:"version_created"`
	// Mappings are the index's mappings, as GET /<index>/_mapping gives
	// them (raw JSON).
	Mappings json.RawMessage `json:"mappings,omitempty"`
}

// Doc is a delivered document's identity within its shard, and the seq
// no it was delivered at.
type Doc struct {
	ID      string
	Routing string
	SeqNo   int64
}

// State is the durable cursor of a feed.
type State struct {
	// Checkpoints is the highest seq no delivered (or skipped as not a
	// document) per shard; absent when the shard was never read.
	Checkpoints map[ShardID]int64
	// Gaps counts, per shard, seq nos read past without a hit since the
	// shard's last delete scan: a shard with no gap cannot have lost a
	// delivered document.
	Gaps map[ShardID]int64
	// Origins are the checkpoints shards started from when not -1 (--from
	// now): documents at or below were never delivered unless rewritten.
	Origins map[ShardID]int64
	// CommittedAt is when each shard's checkpoint was last written.
	CommittedAt map[ShardID]time.Time
	// Histories are the shards' history_uuid as the feed last read them
	// (absent before the feed recorded one).
	Histories map[ShardID]string
	// Indices are the indices the feed has seen, by uuid.
	Indices map[string]IndexInfo
}

// Batch is what one Commit writes atomically.
type Batch struct {
	// Events are appended to the stream in order.
	Events []redisx.Event
	// Checkpoints are set (HSET) per shard.
	Checkpoints map[ShardID]int64
	// Gaps are added (HINCRBY) to each shard's gap counter.
	Gaps map[ShardID]int64
	// Origins are set (HSET) for shards that start above -1.
	Origins map[ShardID]int64
	// Histories are set (HSET): the history_uuid of the shards the batch
	// read.
	Histories map[ShardID]string
	// Delivered documents are recorded in their shard's delivered range
	// of their seq no (redisx.Keys.DeliveredRange), with their routing.
	Delivered map[ShardID][]Doc
	// Removed documents leave the delivered range of their seq no.
	Removed map[ShardID][]Doc
	// LegacyRemoved ids leave each shard's delivered set and routing hash
	// of the layout before ranges (redisx.Keys.Delivered).
	LegacyRemoved map[ShardID][]string
	// Indices are recorded (HSET) by uuid.
	Indices map[string]IndexInfo
	// ForgetShards drop all state of shards: checkpoint and gap fields,
	// delivered ranges and counts, and a set and routing hash of the layout
	// before ranges.
	ForgetShards []ShardID
	// ForgetIndices drop index records by uuid.
	ForgetIndices []string
	// DropKeys are scratch keys of the feed to delete (DEL).
	DropKeys []string
	// Meta fields are set (HSET) on the feed's meta hash.
	Meta map[string]string
	// Generations fields are set (HSET) on the generations hash: "<uuid>"
	// and "name:<index name>" -> generation.
	Generations map[string]int64
}

func (b Batch) empty() bool {
	return len(b.Events) == 0 && len(b.Checkpoints) == 0 && len(b.Gaps) == 0 && len(b.Origins) == 0 && len(b.Histories) == 0 && len(b.Delivered) == 0 &&
		len(b.Removed) == 0 && len(b.LegacyRemoved) == 0 && len(b.Indices) == 0 && len(b.ForgetShards) == 0 && len(b.ForgetIndices) == 0 &&
		len(b.DropKeys) == 0 && len(b.Meta) == 0 && len(b.Generations) == 0
}

// Config configures a Store.
type Config struct {
	// Client is the Redis client. Required.
	Client redis.UniversalClient
	// Keys names the feed's keys. Required.
	Keys redisx.Keys
	// Lease fences commits. Required for Commit, not for Load.
	Lease *redisx.Lease
	// Metrics registers escf_events_written_total, escf_commits_total and
	// escf_commit_duration_seconds. Default nil: not registered.
	Metrics prometheus.Registerer
	// RollbackMemory is how long the Store remembers which documents each
	// commit delivered, so that when Redis loses commits (ErrRolledBack)
	// Rebase can say which documents consumers may have applied from
	// entries that are gone. Default DefaultRollbackMemory.
	RollbackMemory time.Duration
	// WaitReplicas, when above 0, makes every commit wait (Redis WAIT,
	// on the connection of the transaction, after EXEC) until that many
	// replicas acknowledged it: a commit fewer replicas acknowledged within
	// WaitTimeout returns an error wrapping ErrNotReplicated. Default 0: no
	// waiting (a failover to a lagging replica may lose acknowledged
	// commits; ErrRolledBack detects it).
	WaitReplicas int
	// WaitTimeout bounds each WAIT. Default DefaultWaitTimeout.
	WaitTimeout time.Duration
}

// DefaultWaitTimeout is Config.WaitTimeout when zero.
const DefaultWaitTimeout = time.Second

// DefaultRollbackMemory is Config.RollbackMemory when zero: well above the
// second appendfsync everysec may lose.
const DefaultRollbackMemory = 10 * time.Second

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Client == nil {
		return errors.New("checkpoint config: Client is nil")
	}
	if c.Keys.Feed() == "" {
		return errors.New("checkpoint config: Keys is empty (use redisx.NewKeys)")
	}
	if c.RollbackMemory < 0 {
		return fmt.Errorf("checkpoint config: RollbackMemory = %s: want >= 0", c.RollbackMemory)
	}
	if c.WaitReplicas < 0 {
		return fmt.Errorf("checkpoint config: WaitReplicas = %d: want >= 0 (0: do not wait for replicas)", c.WaitReplicas)
	}
	if c.WaitTimeout < 0 {
		return fmt.Errorf("checkpoint config: WaitTimeout = %s: want > 0 (default %s)", c.WaitTimeout, DefaultWaitTimeout)
	}
	return nil
}

// Store loads and commits a feed's state. It is safe for concurrent use.
type Store struct {
	cfg Config

	events     *prometheus.CounterVec
	commits    prometheus.Counter
	commitTime prometheus.Histogram
	waitShort  prometheus.Counter

	mu sync.Mutex
	// high is the highest value of the meta commits counter this Store
	// committed (or found at Rebase): Redis holding less lost writes it
	// acknowledged.
	high int64
	// acked is the highest count of a commit Commit returned nil for
	// (<= high; commits above it returned ErrNotReplicated).
	acked int64
	// sent are the recent commits that delivered documents, oldest first,
	// kept for RollbackMemory; forgotten is the highest count dropped.
	sent      []*sentBatch
	forgotten int64
	// doubts are commits in doubt (ErrInDoubt), oldest first, until
	// resolve finds out whether they landed.
	doubts []*doubt

	// resolving serializes resolve.
	resolving sync.Mutex

	// buffers pools *commitBuffers.
	buffers sync.Pool
}

// doubt is a commit whose EXEC was sent but whose reply never came: a copy
// of its batch and the token it wrote (Keys.Tokens) if it landed.
type doubt struct {
	batch Batch
	token string
	field string // the Tokens field that tells whether it landed
}

// sentBatch is what one commit delivered, and its value of the commit
// counter.
type sentBatch struct {
	count int64
	at    time.Time
	docs  map[ShardID][]Doc
}

// New returns a Store.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RollbackMemory == 0 {
		cfg.RollbackMemory = DefaultRollbackMemory
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	s := &Store{cfg: cfg,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escf_events_written_total",
			Help: "Events committed to the stream, by op."}, []string{"op"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{Name: "escf_commits_total",
			Help: "Transactions committed (events, checkpoints and delivered ids in one MULTI/EXEC)."}),
		commitTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escf_commit_duration_seconds",
			Help: "Time of one commit transaction.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		waitShort: prometheus.NewCounter(prometheus.CounterOpts{Name: "escf_commits_unreplicated_total",
			Help: "Commits fewer replicas acknowledged (WAIT) than --wait-replicas within --wait-timeout."}),
	}
	if cfg.Metrics != nil {
		cs := []prometheus.Collector{s.events, s.commits, s.commitTime}
		if cfg.WaitReplicas > 0 {
			cs = append(cs, s.waitShort)
		}
		for _, c := range cs {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("checkpoint metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Client is the Redis client the store writes to.
func (s *Store) Client() redis.UniversalClient { return s.cfg.Client }

// Keys names the feed's keys.
func (s *Store) Keys() redisx.Keys { return s.cfg.Keys }

// Meta reads the feed's meta hash (empty when the feed has none).
func (s *Store) Meta(ctx context.Context) (map[string]string, error) {
	return ReadMeta(ctx, s.cfg.Client, s.cfg.Keys)
}

// ErrStateLost means the feed's stream exists but its state (meta hash,
// checkpoints) does not: Redis lost it (a restart without persistence, an
// eviction, a FLUSH). Continuing would restart the feed silently; resync
// rebuilds it with a snapshot instead.
var ErrStateLost = errors.New("the feed's state is lost")

// ErrRolledBack means Redis holds an older state than this Store committed:
// writes it acknowledged are gone. Redis restarted from an append-only file
// or snapshot that missed its last writes (appendfsync everysec and a power
// failure), or failed over to a replica that lagged. The state it holds is
// consistent (each batch is one transaction), only older: Commit wrote
// nothing, and keeps refusing until the holder of the state in memory loads
// it again and calls Rebase; the relay then reads the lost changes again
// from the cluster.
var ErrRolledBack = errors.New("the feed's state in Redis rolled back")

// ErrNotReplicated means a commit was written to the Redis master but fewer
// replicas than Config.WaitReplicas acknowledged it within WaitTimeout (or
// the connection failed during WAIT): a failover now could lose it. The
// caller Rebases and Loads again before going on, as after any failed
// Commit. The Store remembers the commit: if a failover loses it, Rebase
// reports it (and its documents: consumers may have read it from the
// master), but not as RolledBack.Acknowledged.
var ErrNotReplicated = errors.New("commit not acknowledged by enough replicas")

// ErrInDoubt means a commit's transaction was sent to Redis but its reply
// never came (the connection broke, a timeout): Redis may have carried it
// out — and consumers may have read its entries — or not. The Store keeps
// the batch and decides before it commits or loads anything else, by the
// commit token the transaction writes (Keys.Tokens): landed, it is
// remembered like any commit (for Rebase); not landed and nothing else
// lost, it is committed again unchanged (consumers that saw a copy of its
// entries apply the same events again, which their fences make harmless);
// not landed while Redis lost other commits too, its documents join what
// Rebase reports as possibly delivered. The caller loads the state again,
// as after any failed Commit. Errors before the transaction was sent are
// definite failures, not ErrInDoubt.
var ErrInDoubt = errors.New("commit in doubt: sent to Redis, no reply")

// RolledBack is what Rebase found Redis lost of this Store's commits.
type RolledBack struct {
	// Commits is how many commits Redis lost (0: none).
	Commits int64
	// Delivered are the documents the lost commits delivered: consumers may
	// have applied them from stream entries that are gone. (A commit whose
	// reply was lost is not known to have delivered anything: Redis would
	// have had to lose it just after consumers read it.)
	Delivered map[ShardID][]Doc
	// Forgotten is set when some lost commits are older than
	// RollbackMemory: their documents are not in Delivered.
	Forgotten bool
	// Acknowledged is how many of the lost commits Commit had returned
	// nil for (with Config.WaitReplicas: that many replicas had them, or a
	// later commit they preceded), as opposed to commits it returned
	// ErrNotReplicated for. With WaitReplicas > 0 it is 0 unless Redis lost
	// more than a failover to an acknowledging replica can.
	Acknowledged int64
}

// Merge adds o to r.
func (r *RolledBack) Merge(o RolledBack) {
	r.Commits += o.Commits
	r.Acknowledged += o.Acknowledged
	r.Forgotten = r.Forgotten || o.Forgotten
	for id, docs := range o.Delivered {
		if r.Delivered == nil {
			r.Delivered = map[ShardID][]Doc{}
		}
		r.Delivered[id] = append(r.Delivered[id], docs...)
	}
}

// Rebase takes the state Redis holds now as the one this Store continues
// from (the reference for ErrRolledBack), and reports what Redis lost of
// this Store's commits. Call it before loading the state to work from,
// while no Commit of this Store is in flight. It writes nothing.
func (s *Store) Rebase(ctx context.Context) (RolledBack, error) {
	if err := s.resolve(ctx); err != nil && !errors.Is(err, ErrRolledBack) {
		return RolledBack{}, err
	}
	n, err := s.cfg.Client.HGet(ctx, s.cfg.Keys.Meta(), MetaCommits).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return RolledBack{}, fmt.Errorf("read %s %s: %w", s.cfg.Keys.Meta(), MetaCommits, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var rb RolledBack
	if n < s.high {
		rb.Commits, rb.Forgotten = s.high-n, s.forgotten > n
		rb.Acknowledged = max(0, s.acked-n)
		keep := s.sent[:0]
		for _, b := range s.sent {
			if b.count <= n {
				keep = append(keep, b)
				continue
			}
			rb.Merge(RolledBack{Delivered: b.docs})
		}
		clear(s.sent[len(keep):])
		s.sent = keep
		s.forgotten = min(s.forgotten, n) // counts above n are given again
	}
	s.high, s.acked = n, min(s.acked, n)
	return rb, nil
}

// committed is the highest commit count this Store has seen.
func (s *Store) committed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.high
}

// sawCommit records a commit written on the master: its count, whether
// it was acknowledged (not ErrNotReplicated), and the documents it
// delivered (forgetting those older than RollbackMemory).
func (s *Store) sawCommit(n int64, delivered map[ShardID][]Doc, acked bool) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.high = max(s.high, n)
	if acked {
		s.acked = max(s.acked, n)
	}
	drop := 0
	for drop < len(s.sent) && now.Sub(s.sent[drop].at) > s.cfg.RollbackMemory {
		s.forgotten = max(s.forgotten, s.sent[drop].count)
		drop++
	}
	clear(s.sent[:drop])
	s.sent = s.sent[drop:]
	if len(delivered) > 0 {
		s.sent = append(s.sent, &sentBatch{count: n, at: now, docs: delivered})
	}
}

// CheckState refuses a feed whose stream exists without its meta hash, or
// whose resync was interrupted.
func (s *Store) CheckState(ctx context.Context) error {
	k := s.cfg.Keys
	streamLen, err := s.cfg.Client.XLen(ctx, k.Events()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("check the feed's state: %w", err)
	}
	meta, err := s.Meta(ctx)
	if err != nil {
		return err
	}
	switch {
	case meta[MetaSnapshot] != "":
		return fmt.Errorf("%w: the resync started at %s was interrupted: run `es-changefeed resync` again", ErrStateLost, meta[MetaSnapshot])
	case streamLen > 0 && len(meta) == 0:
		return fmt.Errorf("%w: %s holds %d events but %s, %s and %s are missing (Redis restarted without persistence, or keys were evicted or deleted?): run `es-changefeed resync` to rebuild the feed with a snapshot",
			ErrStateLost, k.Events(), streamLen, k.Meta(), k.Checkpoints(), k.Indices())
	}
	return nil
}

// Meta fields.
const (
	// MetaCreated is when the feed first followed an index (RFC 3339).
	MetaCreated = "created"
	// MetaSnapshot is set while a resync's snapshot is being written.
	MetaSnapshot = "snapshot_in_progress"
	// MetaLeaseOwner and MetaLeaseSince say which relay leads and since
	// when (RFC 3339); written when a relay acquires the lease.
	MetaLeaseOwner = "lease_owner"
	MetaLeaseSince = "lease_since"
	// MetaBackpressure is when the relay paused reading because a group
	// lags by more than --max-backlog; empty when it reads.
	MetaBackpressure = "backpressure_since"
	// MetaCommits counts commits (each one increments it): a value below
	// one a relay committed means Redis lost acknowledged writes
	// (ErrRolledBack).
	MetaCommits = "commits"
)

// Reset deletes the feed's state — every key but the stream, the lease, the
// dead-letter stream, the generations and the fences — so that resync can
// rebuild it. It is not atomic
// (keys are found with SCAN); an interrupted reset is finished by the next
// one. On Redis Cluster it scans every master (the feed's keys share one
// slot, but a slot being migrated has keys on two nodes).
func (s *Store) Reset(ctx context.Context) (int, error) {
	cc, ok := s.cfg.Client.(*redis.ClusterClient)
	if !ok {
		return s.reset(ctx, s.cfg.Client)
	}
	var mu sync.Mutex
	deleted := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := s.reset(ctx, node)
		mu.Lock()
		deleted += n
		mu.Unlock()
		return err
	})
	return deleted, err
}

// reset is Reset with SCAN on one server (deletes go through the Store's
// client, which routes them).
func (s *Store) reset(ctx context.Context, scanner redis.Cmdable) (int, error) {
	k := s.cfg.Keys
	// The stream, lease and dead letters are not state; generations and
	// consumer fences must outlive a resync (versions and orders already
	// applied downstream were built from them).
	keep := map[string]bool{k.Events(): true, k.Lease(): true, k.Dead(): true, k.Generations(): true}
	fences := k.Fence("")
	var cursor uint64
	deleted := 0
	for {
		keys, next, err := scanner.Scan(ctx, cursor, k.Pattern(), 1000).Result()
		if err != nil {
			return deleted, fmt.Errorf("reset %s: %w", k.Feed(), err)
		}
		var drop []string
		for _, key := range keys {
			if !keep[key] && !strings.HasPrefix(key, fences) {
				drop = append(drop, key)
			}
		}
		if len(drop) > 0 {
			if err := s.cfg.Client.Del(ctx, drop...).Err(); err != nil {
				return deleted, fmt.Errorf("reset %s: %w", k.Feed(), err)
			}
			deleted += len(drop)
		}
		if next == 0 {
			// The commit counter went with the meta hash.
			s.mu.Lock()
			s.high, s.acked, s.sent, s.forgotten, s.doubts = 0, 0, nil, 0, nil
			s.mu.Unlock()
			return deleted, nil
		}
		cursor = next
	}
}

// NextGeneration returns the generation an index uuid has, or the one it
// would get as the next index of its name (assigned by committing
// Batch.Generations). Only the lease holder assigns generations.
func (s *Store) NextGeneration(ctx context.Context, uuid, name string) (gen int64, assigned bool, err error) {
	vals, err := s.cfg.Client.HMGet(ctx, s.cfg.Keys.Generations(), uuid, "name:"+name).Result()
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", s.cfg.Keys.Generations(), err)
	}
	parse := func(v any) int64 {
		str, _ := v.(string)
		n, _ := strconv.ParseInt(str, 10, 64)
		return n
	}
	if g := parse(vals[0]); g > 0 {
		return g, true, nil
	}
	return parse(vals[1]) + 1, false, nil
}

// Load reads the checkpoints and known indices. A commit of this Store in
// doubt (ErrInDoubt) is resolved first, so the state read includes it if
// it is to be included; if Redis lost commits meanwhile, Load returns
// ErrRolledBack.
func (s *Store) Load(ctx context.Context) (State, error) {
	if err := s.resolve(ctx); err != nil {
		return State{}, err
	}
	st := State{Checkpoints: map[ShardID]int64{}, Gaps: map[ShardID]int64{}, Origins: map[ShardID]int64{},
		CommittedAt: map[ShardID]time.Time{}, Histories: map[ShardID]string{}, Indices: map[string]IndexInfo{}}
	at := map[ShardID]int64{}
	cps, err := s.cfg.Client.HGetAll(ctx, s.cfg.Keys.Checkpoints()).Result()
	if err != nil {
		return st, fmt.Errorf("load checkpoints %s: %w", s.cfg.Keys.Checkpoints(), err)
	}
	for field, v := range cps {
		if f, ok := strings.CutSuffix(field, "/history"); ok {
			id, ok := parseShardField(f)
			if !ok {
				return st, fmt.Errorf("load checkpoints %s: field %q is not <index_uuid>/<shard>/history", s.cfg.Keys.Checkpoints(), field)
			}
			st.Histories[id] = v
			continue
		}
		dst := st.Checkpoints
		name := field
		if f, ok := strings.CutSuffix(field, "/gap"); ok {
			dst, name = st.Gaps, f
		} else if f, ok := strings.CutSuffix(field, "/origin"); ok {
			dst, name = st.Origins, f
		} else if f, ok := strings.CutSuffix(field, "/at"); ok {
			dst, name = at, f
		}
		id, ok := parseShardField(name)
		if !ok {
			return st, fmt.Errorf("load checkpoints %s: field %q is not <index_uuid>/<shard>[/gap|/origin|/at|/history]", s.cfg.Keys.Checkpoints(), field)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return st, fmt.Errorf("load checkpoints %s: field %q = %q is not an integer", s.cfg.Keys.Checkpoints(), field, v)
		}
		dst[id] = n
	}
	for id, ms := range at {
		st.CommittedAt[id] = time.UnixMilli(ms)
	}
	idx, err := s.cfg.Client.HGetAll(ctx, s.cfg.Keys.Indices()).Result()
	if err != nil {
		return st, fmt.Errorf("load indices %s: %w", s.cfg.Keys.Indices(), err)
	}
	for uuid, v := range idx {
		var info IndexInfo
		if err := json.Unmarshal([]byte(v), &info); err != nil {
			return st, fmt.Errorf("load indices %s: field %q: %w", s.cfg.Keys.Indices(), uuid, err)
		}
		st.Indices[uuid] = info
	}
	return st, nil
}

// Index reads the record of one index by uuid (HGET on the indices hash),
// as Load decodes it; ok is false when the feed has no record of it.
func (s *Store) Index(ctx context.Context, uuid string) (info IndexInfo, ok bool, err error) {
	v, err := s.cfg.Client.HGet(ctx, s.cfg.Keys.Indices(), uuid).Result()
	if errors.Is(err, redis.Nil) {
		return IndexInfo{}, false, nil
	}
	if err != nil {
		return IndexInfo{}, false, fmt.Errorf("read index %s from %s: %w", uuid, s.cfg.Keys.Indices(), err)
	}
	if err := json.Unmarshal([]byte(v), &info); err != nil {
		return IndexInfo{}, false, fmt.Errorf("read index %s from %s: %w", uuid, s.cfg.Keys.Indices(), err)
	}
	return info, true, nil
}

// parseShardField parses "<uuid>/<shard>".
func parseShardField(f string) (ShardID, bool) {
	i := strings.LastIndexByte(f, '/')
	if i <= 0 {
		return ShardID{}, false
	}
	n, err := strconv.Atoi(f[i+1:])
	if err != nil || n < 0 || strings.Contains(f[:i], "/") {
		return ShardID{}, false
	}
	return ShardID{IndexUUID: f[:i], Shard: n}, true
}

// Commit writes a batch in one MULTI/EXEC under WATCH of the lease: XADD
// every event, SADD/SREM delivered ids, HSET checkpoints and indices. If the
// lease is not (or no longer) ours, nothing is written and the error wraps
// redisx.ErrLeaseLost. If Redis lost commits this Store made (a restart
// from an older AOF, a failover to a lagging replica), nothing is written
// and the error wraps ErrRolledBack. An error once the transaction was
// sent wraps ErrInDoubt: the Store keeps the batch and decides whether it
// landed before it loads or commits anything else. After any error the
// caller must Load again before retrying, never resend. On success the events' StreamID fields are set.
// Commit keeps no reference to b.Events once it returns (the caller may
// reuse the slice and what its events point to); b.Delivered it keeps for
// Rebase, for Config.RollbackMemory.
//
// The lease's own renewal (PEXPIRE) also aborts a watched transaction; such
// an abort wrote nothing, so Commit checks the owner again and retries.
func (s *Store) Commit(ctx context.Context, b Batch) error {
	if s.cfg.Lease == nil {
		return errors.New("checkpoint commit: the store has no Lease")
	}
	if b.empty() {
		return nil
	}
	if err := s.resolve(ctx); err != nil {
		return fmt.Errorf("commit %d events to %s: %w", len(b.Events), s.cfg.Keys.Events(), err)
	}
	token := newToken()
	start := time.Now()
	for attempt := 0; ; attempt++ {
		count, err := s.commitOnce(ctx, b, token)
		if errors.Is(err, ErrInDoubt) {
			s.addDoubt(b, token)
			return err
		}
		if errors.Is(err, ErrNotReplicated) {
			// Written on the master (consumers may read it there), but not
			// acknowledged by the replicas: a failover may drop it.
			// Remember it, so that Rebase tells its loss and documents.
			s.sawCommit(count, b.Delivered, false)
			s.waitShort.Inc()
			return err
		}
		if err == nil {
			s.sawCommit(count, b.Delivered, true)
			s.commits.Inc()
			s.commitTime.Observe(time.Since(start).Seconds())
			for _, e := range b.Events {
				s.events.WithLabelValues(string(e.Op)).Inc()
			}
		}
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
		// EXEC returned nil: the lease key was touched. Ours still?
		owner, gerr := s.cfg.Client.Get(ctx, s.cfg.Lease.Key()).Result()
		if gerr != nil && !errors.Is(gerr, redis.Nil) {
			return fmt.Errorf("commit %d events to %s: read lease after an aborted EXEC: %w", len(b.Events), s.cfg.Keys.Events(), gerr)
		}
		if owner != s.cfg.Lease.Token() || attempt >= 10 {
			return fmt.Errorf("commit %d events to %s: %w", len(b.Events), s.cfg.Keys.Events(), redisx.ErrLeaseLost)
		}
	}
}

// commitOnce runs one WATCH … EXEC. WATCH and the owner check share one
// round trip, MULTI … EXEC the second. It returns the commit's count. An
// error once MULTI … EXEC may have reached Redis wraps ErrInDoubt.
func (s *Store) commitOnce(ctx context.Context, b Batch, token string) (int64, error) {
	k := s.cfg.Keys
	leaseKey := s.cfg.Lease.Key()
	stream := k.Events()
	bufs := s.getBuffers(len(b.Events))
	defer s.putBuffers(bufs)
	var count *redis.Cmd
	var waitErr error
	var sent bool // MULTI … EXEC was handed to the connection
	// Commits of this Store acknowledged before this one began: Redis
	// holding fewer lost them. (Concurrent commits only raise the count.)
	known := s.committed()
	// A cluster client must be told the watched key (it picks the node by
	// its slot, and WATCHes it first); a plain client WATCHes it in the
	// first round trip below, with the reads.
	var watched []string
	if _, ok := s.cfg.Client.(*redis.ClusterClient); ok {
		watched = []string{leaseKey}
	}
	err := s.cfg.Client.Watch(ctx, func(tx *redis.Tx) error {
		var owner, stored *redis.StringCmd
		if _, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "WATCH", leaseKey)
			owner = p.Get(ctx, leaseKey)
			stored = p.HGet(ctx, k.Meta(), MetaCommits)
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			tx.Unwatch(ctx)
			return fmt.Errorf("read lease: %w", err)
		}
		if owner.Val() != s.cfg.Lease.Token() {
			tx.Unwatch(ctx)
			return redisx.ErrLeaseLost
		}
		if n, _ := stored.Int64(); n < known {
			tx.Unwatch(ctx)
			return fmt.Errorf("%w: %s %s is %d, but this relay had committed up to %d (Redis restarted from an older append-only file or snapshot, or failed over to a replica that lagged)",
				ErrRolledBack, k.Meta(), MetaCommits, n, known)
		}
		sent = true
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			count = tokenScript.Eval(ctx, p, []string{k.Meta(), k.Tokens()}, tokenArgs(b, token)...)
			args, queued := bufs.args[:0], bufs.cmds[:0]
			for i := range b.Events {
				// Each XADD's arguments are a full slice of one buffer for
				// the batch, pointing at the event's fields.
				n := len(args)
				args = b.Events[i].AppendXAddArgs(args, &stream)
				queued = append(queued, redis.NewStringCmd(ctx, args[n:len(args):len(args)]...))
			}
			bufs.args, bufs.cmds = args, queued
			_ = p.BatchProcess(ctx, queued...) // one append, not one per event
			for id, docs := range b.Delivered {
				if len(docs) == 0 {
					continue
				}
				keys, args := rangeScriptArgs(k, id, docs, true)
				recordRanges.Eval(ctx, p, keys, args...)
			}
			for id, docs := range b.Removed {
				if len(docs) > 0 {
					keys, args := rangeScriptArgs(k, id, docs, false)
					removeRanges.Eval(ctx, p, keys, args...)
				}
			}
			for id, ids := range b.LegacyRemoved {
				if len(ids) > 0 {
					args := make([]any, len(ids))
					for i := range ids {
						args[i] = ids[i]
					}
					p.SRem(ctx, k.Delivered(id.IndexUUID, id.Shard), args...)
					p.HDel(ctx, k.Routing(id.IndexUUID, id.Shard), ids...)
				}
			}
			if len(b.Checkpoints) > 0 {
				now := strconv.FormatInt(time.Now().UnixMilli(), 10)
				vals := make([]any, 0, 4*len(b.Checkpoints))
				for id, cp := range b.Checkpoints {
					vals = append(vals, id.String(), strconv.FormatInt(cp, 10), id.String()+"/at", now)
				}
				p.HSet(ctx, k.Checkpoints(), vals...)
			}
			for id, n := range b.Origins {
				p.HSet(ctx, k.Checkpoints(), redisx.OriginField(id.IndexUUID, id.Shard), strconv.FormatInt(n, 10))
			}
			for id, h := range b.Histories {
				p.HSet(ctx, k.Checkpoints(), redisx.HistoryField(id.IndexUUID, id.Shard), h)
			}
			for id, n := range b.Gaps {
				if n != 0 {
					p.HIncrBy(ctx, k.Checkpoints(), redisx.GapField(id.IndexUUID, id.Shard), n)
				}
			}
			for _, id := range b.ForgetShards {
				p.HDel(ctx, k.Checkpoints(), id.String(), redisx.GapField(id.IndexUUID, id.Shard), redisx.OriginField(id.IndexUUID, id.Shard), id.String()+"/at",
					redisx.HistoryField(id.IndexUUID, id.Shard))
				p.Del(ctx, k.Delivered(id.IndexUUID, id.Shard), k.Routing(id.IndexUUID, id.Shard), k.Scan(id.IndexUUID, id.Shard))
				p.HDel(ctx, k.Tokens(), id.String())
				dropRanges.Eval(ctx, p, []string{k.DeliveredCounts(id.IndexUUID, id.Shard)}, k.DeliveredRangePrefix(id.IndexUUID, id.Shard))
			}
			if len(b.ForgetIndices) > 0 {
				p.HDel(ctx, k.Indices(), b.ForgetIndices...)
			}
			if len(b.DropKeys) > 0 {
				p.Del(ctx, b.DropKeys...)
			}
			if len(b.Generations) > 0 {
				vals := make([]any, 0, 2*len(b.Generations))
				for f, g := range b.Generations {
					vals = append(vals, f, strconv.FormatInt(g, 10))
				}
				p.HSet(ctx, k.Generations(), vals...)
			}
			if len(b.Meta) > 0 {
				vals := make([]any, 0, 2*len(b.Meta))
				for k, v := range b.Meta {
					vals = append(vals, k, v)
				}
				p.HSet(ctx, k.Meta(), vals...)
			}
			if len(b.Indices) > 0 {
				vals := make([]any, 0, 2*len(b.Indices))
				for uuid, info := range b.Indices {
					j, err := json.Marshal(info)
					if err != nil {
						return err
					}
					vals = append(vals, uuid, string(j))
				}
				p.HSet(ctx, k.Indices(), vals...)
			}
			return nil
		})
		if err != nil || s.cfg.WaitReplicas == 0 {
			return err
		}
		// Same connection as EXEC: WAIT counts the replicas that have
		// everything this connection wrote.
		acked, werr := tx.Wait(ctx, s.cfg.WaitReplicas, s.cfg.WaitTimeout).Result()
		switch {
		case werr != nil:
			waitErr = fmt.Errorf("%w: WAIT %d %d: %v", ErrNotReplicated, s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds(), werr)
		case acked < int64(s.cfg.WaitReplicas):
			waitErr = fmt.Errorf("%w: %d of the %d replicas asked for (WaitReplicas) acknowledged it within %s (WaitTimeout)",
				ErrNotReplicated, acked, s.cfg.WaitReplicas, s.cfg.WaitTimeout)
		}
		return nil
	}, watched...)
	if err == nil && count == nil {
		// go-redis's ClusterClient.Watch ends its redirect retries (MOVED,
		// READONLY, a closed pool: a failover under way) with a nil error
		// when the last retry's WATCH failed, without running fn. Nothing
		// was sent: the commit did not happen and may be retried.
		err = errTxNotRun
	}
	switch {
	case err == nil:
	case errors.Is(err, redis.TxFailedErr):
		return 0, err
	case errors.Is(err, redisx.ErrLeaseLost):
		return 0, fmt.Errorf("commit %d events to %s: %w", len(b.Events), k.Events(), redisx.ErrLeaseLost)
	case sent && inDoubt(err):
		return 0, fmt.Errorf("commit %d events to %s: %w: %w", len(b.Events), k.Events(), ErrInDoubt, err)
	default:
		return 0, fmt.Errorf("commit %d events to %s: %w", len(b.Events), k.Events(), err)
	}
	for i, c := range bufs.cmds {
		b.Events[i].StreamID = c.(*redis.StringCmd).Val()
	}
	n, _ := count.Int64()
	if waitErr != nil {
		return n, fmt.Errorf("commit %d events to %s (commit %d): %w", len(b.Events), k.Events(), n, waitErr)
	}
	return n, nil
}

// inDoubt reports whether an error of MULTI … EXEC leaves it unknown if
// Redis carried the transaction out: not a reply of Redis (it answered:
// EXECABORT, an error of a command), not a failure to connect or to write
// the transaction (EXEC never arrived whole, so Redis discarded the rest
// with the connection), not a closed client.
func inDoubt(err error) bool {
	var re redis.Error
	var op *net.OpError
	switch {
	case err == nil, errors.As(err, &re), errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout):
		return false
	case errors.As(err, &op) && (op.Op == "dial" || op.Op == "write"):
		return false
	}
	return true
}

// tokenScript counts a commit in the meta hash and records its token with
// that count in the tokens hash (redisx.Keys.Tokens), for each shard it
// touches: KEYS[1] meta, KEYS[2] tokens; ARGV[1] the counter's field,
// ARGV[2] the token, ARGV[3…] the tokens fields. It returns the count.
var tokenScript = redis.NewScript(`
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local v = ARGV[2] .. ' ' .. n
for i = 3, #ARGV do redis.call('HSET', KEYS[2], ARGV[i], v) end
return n`)

// tokenArgs are tokenScript's arguments for a batch.
func tokenArgs(b Batch, token string) []any {
	fields := tokenFields(b)
	args := make([]any, 0, 2+len(fields))
	args = append(args, MetaCommits, token)
	for _, f := range fields {
		args = append(args, f)
	}
	return args
}

// tokenFields are the tokens-hash fields a batch writes: one per shard it
// touches and does not forget, sorted; redisx.TokenNoShard when there is
// none.
func tokenFields(b Batch) []string {
	set := map[string]bool{}
	add := func(id ShardID) { set[id.String()] = true }
	for _, ids := range [][]ShardID{slices.Collect(maps.Keys(b.Checkpoints)), slices.Collect(maps.Keys(b.Gaps)),
		slices.Collect(maps.Keys(b.Origins)), slices.Collect(maps.Keys(b.Histories)), slices.Collect(maps.Keys(b.Delivered)),
		slices.Collect(maps.Keys(b.Removed)), slices.Collect(maps.Keys(b.LegacyRemoved))} {
		for _, id := range ids {
			add(id)
		}
	}
	for _, e := range b.Events {
		if e.Op == redisx.OpUpsert || e.Op == redisx.OpDelete {
			add(ShardID{IndexUUID: e.IndexUUID, Shard: e.Shard})
		}
	}
	for _, id := range b.ForgetShards {
		delete(set, id.String())
	}
	if len(set) == 0 {
		return []string{redisx.TokenNoShard}
	}
	return slices.Sorted(maps.Keys(set))
}

// newToken returns a random commit token.
func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// addDoubt keeps a copy of a batch in doubt for resolve: the caller may
// reuse the batch's events and what they point to once Commit returns.
func (s *Store) addDoubt(b Batch, token string) {
	c := b
	c.Events = make([]redisx.Event, len(b.Events))
	for i, e := range b.Events {
		e.StreamID = ""
		e.Source = slices.Clone(e.Source)
		e.Counts = maps.Clone(e.Counts)
		c.Events[i] = e
	}
	c.Checkpoints, c.Gaps, c.Origins, c.Histories = maps.Clone(b.Checkpoints), maps.Clone(b.Gaps), maps.Clone(b.Origins), maps.Clone(b.Histories)
	c.Meta, c.Generations, c.Indices = maps.Clone(b.Meta), maps.Clone(b.Generations), maps.Clone(b.Indices)
	s.mu.Lock()
	s.doubts = append(s.doubts, &doubt{batch: c, token: token, field: tokenFields(b)[0]})
	s.mu.Unlock()
}

// InDoubt is how many commits of the Store are in doubt (ErrInDoubt) and
// not yet resolved.
func (s *Store) InDoubt() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.doubts)
}

// resolve decides each commit in doubt, oldest first (see ErrInDoubt): by
// its token it landed (remembered as committed), or not. One that did not
// land is committed again unchanged when Redis holds every other commit of
// this Store; when Redis lost commits, its documents are remembered as
// possibly delivered (Rebase reports them) and resolve returns
// ErrRolledBack. It returns the first error that leaves a commit in doubt.
func (s *Store) resolve(ctx context.Context) error {
	s.resolving.Lock()
	defer s.resolving.Unlock()
	for {
		s.mu.Lock()
		if len(s.doubts) == 0 {
			s.mu.Unlock()
			return nil
		}
		d := s.doubts[0]
		s.mu.Unlock()
		done := func() {
			s.mu.Lock()
			s.doubts = slices.Delete(s.doubts, 0, 1)
			s.mu.Unlock()
		}
		k := s.cfg.Keys
		v, err := s.cfg.Client.HGet(ctx, k.Tokens(), d.field).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("resolve a commit in doubt: read %s %s: %w", k.Tokens(), d.field, err)
		}
		if rest, ok := strings.CutPrefix(v, d.token+" "); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil {
				return fmt.Errorf("resolve a commit in doubt: %s %s = %q: want \"<token> <count>\"", k.Tokens(), d.field, v)
			}
			s.sawCommit(n, d.batch.Delivered, s.cfg.WaitReplicas == 0)
			done()
			continue
		}
		n, err := s.cfg.Client.HGet(ctx, k.Meta(), MetaCommits).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("resolve a commit in doubt: read %s %s: %w", k.Meta(), MetaCommits, err)
		}
		if known := s.committed(); n < known {
			// Redis lost commits this Store made: this one went with them
			// or never landed. Consumers may have read it either way.
			s.mu.Lock()
			s.sent = append(s.sent, &sentBatch{count: math.MaxInt64, at: time.Now(), docs: d.batch.Delivered})
			s.mu.Unlock()
			done()
			return fmt.Errorf("%w: %s %s is %d, but this relay had committed up to %d (found resolving a commit in doubt)",
				ErrRolledBack, k.Meta(), MetaCommits, n, known)
		}
		// Not there, nothing else lost: it never landed, or Redis lost just
		// it. Either way the same batch again is right.
		count, err := s.commitOnce(ctx, d.batch, d.token)
		switch {
		case err == nil:
			s.sawCommit(count, d.batch.Delivered, true)
			s.commits.Inc()
			for _, e := range d.batch.Events {
				s.events.WithLabelValues(string(e.Op)).Inc()
			}
			done()
		case errors.Is(err, ErrNotReplicated):
			s.sawCommit(count, d.batch.Delivered, false)
			done()
			return err
		default:
			return fmt.Errorf("resolve a commit in doubt: %w", err)
		}
	}
}

// commitBuffers are what one commit reuses from an earlier one: the XADD
// arguments of its events and their commands (*redis.StringCmd).
type commitBuffers struct {
	args []any
	cmds []redis.Cmder
}

// xaddArgs is the most arguments Event.AppendXAddArgs appends for one
// event.
const xaddArgs = 27

func (s *Store) getBuffers(events int) *commitBuffers {
	bufs, _ := s.buffers.Get().(*commitBuffers)
	if bufs == nil {
		bufs = &commitBuffers{}
	}
	if need := events * xaddArgs; cap(bufs.args) < need {
		bufs.args = make([]any, 0, need)
	}
	return bufs
}

// putBuffers returns buffers for the next commit, emptied so that they do
// not keep this batch's events alive.
func (s *Store) putBuffers(bufs *commitBuffers) {
	clear(bufs.args)
	clear(bufs.cmds)
	bufs.args, bufs.cmds = bufs.args[:0], bufs.cmds[:0]
	s.buffers.Put(bufs)
}

// errTxNotRun: the client returned from Watch without running the
// transaction.
var errTxNotRun = errors.New("the transaction was not run (Redis Cluster kept redirecting the WATCH; a failover may be under way)")
