// Package status gathers a feed's state for operators: the checkpoints of
// each shard against the cluster's global checkpoints, the stream, the
// consumer groups, the lease and the dead letters; it renders them as text,
// JSON or an HTML page, judges health, and serves /metrics, /healthz,
// /readyz and the page over HTTP.
package status

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// DefaultMaxLag is the lag (operations behind a shard's global checkpoint,
// or entries not yet delivered to a group) above which a feed is unhealthy.
const DefaultMaxLag = 10_000

// Sources are what Gather reads.
type Sources struct {
	// Redis is the feed's Redis. Required.
	Redis redis.UniversalClient
	// Keys names the feed's keys. Required.
	Keys redisx.Keys
	// ES, when set, gives each shard's current global checkpoint; an
	// unreachable cluster is reported, not fatal.
	ES *es.Client
	// MaxLag is the health threshold of shard and group lags. Default
	// DefaultMaxLag.
	MaxLag int64
	// Partition and Partitions: with Partitions > 1, Keys are partition
	// Partition's (redisx.PartitionKeys) and only the shards that map to it
	// (redisx.Partition) are listed. Default 0 and 0: the whole feed.
	Partition, Partitions int
}

// Report is the state of one feed at one moment.
type Report struct {
	Feed    string    `json:"feed"`
	At      time.Time `json:"at"`
	Created string    `json:"created,omitempty"`
	Healthy bool      `json:"healthy"`
	// Problems say why the feed is unhealthy (empty when healthy).
	Problems     []string `json:"problems"`
	Lease        Lease    `json:"lease"`
	Backpressure string   `json:"backpressure_since,omitempty"`
	Stream       Stream   `json:"stream"`
	Groups       []Group  `json:"groups"`
	DeadLetters  int64    `json:"dead_letters"`
	Indices      []Index  `json:"indices"`
	// Cluster is "elasticsearch 9.5.5", "unreachable: …", or "" when not
	// asked.
	Cluster string `json:"cluster,omitempty"`
}

// Lease is who leads the feed.
type Lease struct {
	Held  bool      `json:"held"`
	Owner string    `json:"owner,omitempty"`
	Since time.Time `json:"since,omitempty"`
	// TTL is the time left before the lease expires without renewal.
	TTL Seconds `json:"ttl_seconds"`
}

// Stream is the events stream.
type Stream struct {
	Length       int64   `json:"length"`
	EntriesAdded int64   `json:"entries_added"`
	FirstID      string  `json:"first_id,omitempty"`
	LastID       string  `json:"last_id,omitempty"`
	FirstAge     Seconds `json:"first_age_seconds"`
	LastAge      Seconds `json:"last_age_seconds"`
}

// Group is one consumer group.
type Group struct {
	Name              string     `json:"name"`
	Consumers         []Consumer `json:"consumers"`
	Pending           int64      `json:"pending"`
	OldestPendingIdle Seconds    `json:"oldest_pending_idle_seconds"`
	// Lag is the entries in the stream not yet delivered to the group.
	Lag           int64  `json:"lag"`
	LastDelivered string `json:"last_delivered_id"`
	// HistoryLost is the entries the group had not handled that are gone
	// from the stream (-1: some, how many unknown), and LostReason what a
	// consumer recorded when it found the loss (escf:{feed}:lost).
	HistoryLost int64  `json:"history_lost"`
	LostReason  string `json:"history_lost_reason,omitempty"`
}

// Consumer is one consumer of a group.
type Consumer struct {
	Name    string  `json:"name"`
	Pending int64   `json:"pending"`
	Idle    Seconds `json:"idle_seconds"`
}

// Index is one followed index.
type Index struct {
	Name   string  `json:"name"`
	UUID   string  `json:"index_uuid"`
	Target string  `json:"target"`
	Shards []Shard `json:"shards"`
	// Missing is set when the cluster was asked and does not have it.
	Missing bool `json:"missing,omitempty"`
}

// Shard is one shard's cursor.
type Shard struct {
	Shard      int       `json:"shard"`
	Checkpoint int64     `json:"checkpoint"`
	LastCommit time.Time `json:"last_commit,omitempty"`
	// GlobalCheckpoint and Lag are set when the cluster answered.
	GlobalCheckpoint *int64 `json:"global_checkpoint,omitempty"`
	Lag              *int64 `json:"lag,omitempty"`
	Gap              int64  `json:"undelivered_since_scan"`
	// DeliveredIDs and DeliveredRanges: the entries the feed holds for
	// delete scans (ids delivered and live when last seen; an id updated
	// to a later range since the last scan counts twice until the scan),
	// and the range hashes holding them.
	DeliveredIDs    int64 `json:"delivered_ids"`
	DeliveredRanges int64 `json:"delivered_ranges"`
	// ToMigrate: ids in the delivered set of the version before ranges,
	// moved into ranges by the shard's next delete scan.
	ToMigrate int64 `json:"delivered_ids_to_migrate,omitempty"`
}

// Seconds is a duration printed in seconds.
type Seconds float64

func dur(d time.Duration) Seconds { return Seconds(d.Seconds()) }

// Duration converts back.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// Gather reads the feed's state. Redis errors are returned; a cluster that
// cannot be read is reported in the report.
func Gather(ctx context.Context, src Sources) (Report, error) {
	if src.MaxLag == 0 {
		src.MaxLag = DefaultMaxLag
	}
	k := src.Keys
	rdb := src.Redis
	now := time.Now()
	r := Report{Feed: k.Feed(), At: now.UTC(), Groups: []Group{}, Indices: []Index{}, Problems: []string{}}
	store, err := checkpoint.New(checkpoint.Config{Client: rdb, Keys: k})
	if err != nil {
		return r, err
	}
	meta, err := store.Meta(ctx)
	if err != nil {
		return r, err
	}
	r.Created = meta[checkpoint.MetaCreated]
	r.Backpressure = meta[checkpoint.MetaBackpressure]
	if err := store.CheckState(ctx); err != nil {
		if !errors.Is(err, checkpoint.ErrStateLost) {
			return r, err
		}
		r.Problems = append(r.Problems, err.Error())
	}
	// Lease.
	owner, err := rdb.Get(ctx, k.Lease()).Result()
	switch {
	case errors.Is(err, redis.Nil):
		r.Problems = append(r.Problems, "no relay holds the lease: none is running (or it stopped)")
	case err != nil:
		return r, err
	default:
		r.Lease.Held, r.Lease.Owner = true, owner
		if ttl, err := rdb.PTTL(ctx, k.Lease()).Result(); err == nil && ttl > 0 {
			r.Lease.TTL = dur(ttl)
		}
		if meta[checkpoint.MetaLeaseOwner] == owner {
			if t, err := time.Parse(time.RFC3339, meta[checkpoint.MetaLeaseSince]); err == nil {
				r.Lease.Since = t
			}
		}
	}
	// Stream.
	info, err := rdb.XInfoStream(ctx, k.Events()).Result()
	switch {
	case err != nil && redis.HasErrorPrefix(err, "no such key"): // HasErrorPrefix drops the reply's "ERR "
	case err != nil:
		return r, fmt.Errorf("XINFO STREAM %s: %w", k.Events(), err)
	default:
		r.Stream = Stream{Length: info.Length, EntriesAdded: info.EntriesAdded}
		if info.Length > 0 {
			first, last := info.FirstEntry.ID, info.LastEntry.ID
			if first == "" { // a server that leaves them out of XINFO STREAM
				if m, err := rdb.XRangeN(ctx, k.Events(), "-", "+", 1).Result(); err == nil && len(m) == 1 {
					first = m[0].ID
				}
				if m, err := rdb.XRevRangeN(ctx, k.Events(), "+", "-", 1).Result(); err == nil && len(m) == 1 {
					last = m[0].ID
				}
			}
			r.Stream.FirstID, r.Stream.LastID = first, last
			r.Stream.FirstAge, r.Stream.LastAge = dur(now.Sub(idTime(first))), dur(now.Sub(idTime(last)))
		}
		streamState, groups, err := redisx.ReadGroups(ctx, rdb, k.Events())
		if err != nil {
			return r, err
		}
		recorded, err := redisx.ReadLosses(ctx, rdb, k)
		if err != nil {
			return r, err
		}
		for _, g := range groups {
			grp := Group{Name: g.Name, Pending: g.Pending, Lag: g.Lag, LastDelivered: g.LastDelivered, Consumers: []Consumer{},
				HistoryLost: g.Lost(), LostReason: recorded[g.Name]}
			if grp.HistoryLost == 0 && grp.LostReason != "" {
				grp.HistoryLost = -1 // found by a consumer, and no longer visible in the stream
			}
			switch {
			case grp.LostReason != "":
				r.Problems = append(r.Problems, fmt.Sprintf("%s (found by a consumer, recorded in %s)", grp.LostReason, k.Lost()))
			case grp.HistoryLost != 0:
				r.Problems = append(r.Problems, (&redisx.HistoryLostError{Feed: k.Feed(), Stream: k.Events(), State: streamState, Group: g}).Error())
			}
			consumers, err := rdb.XInfoConsumers(ctx, k.Events(), g.Name).Result()
			if err != nil {
				return r, err
			}
			for _, c := range consumers {
				grp.Consumers = append(grp.Consumers, Consumer{Name: c.Name, Pending: c.Pending, Idle: dur(c.Idle)})
			}
			if g.Pending > 0 {
				oldest, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.Events(), Group: g.Name, Start: "-", End: "+", Count: 1}).Result()
				if err == nil && len(oldest) == 1 {
					grp.OldestPendingIdle = dur(oldest[0].Idle)
				}
			}
			if grp.Lag > src.MaxLag {
				r.Problems = append(r.Problems, fmt.Sprintf("group %s lags by %d entries (more than --max-lag %d)", g.Name, grp.Lag, src.MaxLag))
			}
			r.Groups = append(r.Groups, grp)
		}
	}
	if r.DeadLetters, err = rdb.XLen(ctx, k.Dead()).Result(); err != nil {
		return r, err
	}
	if r.DeadLetters > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d events in the dead-letter stream %s", r.DeadLetters, k.Dead()))
	}
	// Indices and shards.
	state, err := store.Load(ctx)
	if err != nil {
		return r, err
	}
	var stats map[string]es.IndexStats
	unread := map[string]bool{} // indices whose stats the cluster did not give
	if src.ES != nil {
		if ci, err := src.ES.Info(ctx); err != nil {
			r.Cluster = "unreachable: " + err.Error()
			r.Problems = append(r.Problems, "cannot read the cluster: "+err.Error())
		} else {
			r.Cluster = ci.Distribution + " " + ci.Version
			stats = map[string]es.IndexStats{}
			for _, info := range state.Indices {
				if _, done := stats[info.Name]; done || unread[info.Name] {
					continue
				}
				st, err := src.ES.Stats(ctx, []string{info.Name})
				switch {
				case err == nil:
					stats[info.Name] = st[info.Name]
				case es.IsNotFound(err):
					// Missing, below.
				default:
					// Refused (403), partial, unreachable: not knowing is
					// not "missing".
					unread[info.Name] = true
					r.Problems = append(r.Problems, fmt.Sprintf("cannot read the stats of %s: %v", info.Name, err))
				}
			}
		}
	}
	for uuid, info := range state.Indices {
		ix := Index{Name: info.Name, UUID: uuid, Target: info.Target, Shards: []Shard{}}
		st, asked := stats[info.Name]
		if src.ES != nil && r.Cluster != "" && !strings.HasPrefix(r.Cluster, "unreachable") && !unread[info.Name] && (!asked || st.UUID != uuid) {
			ix.Missing = true
		}
		for n := 0; n < info.Shards; n++ {
			if src.Partitions > 1 && redisx.Partition(uuid, n, src.Partitions) != src.Partition {
				continue // another partition's shard
			}
			id := checkpoint.ShardID{IndexUUID: uuid, Shard: n}
			cp, ok := state.Checkpoints[id]
			if !ok {
				cp = -1
			}
			sh := Shard{Shard: n, Checkpoint: cp, LastCommit: state.CommittedAt[id], Gap: state.Gaps[id]}
			size, err := checkpoint.ReadDeliveredSize(ctx, rdb, k, id)
			if err != nil {
				return r, err
			}
			sh.DeliveredIDs, sh.DeliveredRanges, sh.ToMigrate = size.IDs, size.Ranges, size.Legacy
			if asked && !ix.Missing {
				if sc, ok := st.Shard(n); ok {
					g, lag := sc.GlobalCheckpoint, max(0, sc.GlobalCheckpoint-cp)
					sh.GlobalCheckpoint, sh.Lag = &g, &lag
					if lag > src.MaxLag {
						r.Problems = append(r.Problems, fmt.Sprintf("shard %d of %s lags by %d operations (more than --max-lag %d)", n, info.Name, lag, src.MaxLag))
					}
				}
			}
			ix.Shards = append(ix.Shards, sh)
		}
		r.Indices = append(r.Indices, ix)
	}
	sort.Slice(r.Indices, func(i, j int) bool {
		if r.Indices[i].Name != r.Indices[j].Name {
			return r.Indices[i].Name < r.Indices[j].Name
		}
		return r.Indices[i].UUID < r.Indices[j].UUID
	})
	r.Healthy = len(r.Problems) == 0
	return r, nil
}

// idTime is the time in a stream id.
func idTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n)
}
