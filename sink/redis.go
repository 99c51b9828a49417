package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/idempotency"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// RedisMode is what the Redis sink does with an upsert.
type RedisMode string

// The Redis sink's modes.
const (
	// RedisDel deletes the document's key on upserts and deletes (cache
	// invalidation: the application reloads it).
	RedisDel RedisMode = "del"
	// RedisSet sets the document's key to its source JSON on upserts and
	// deletes it on deletes (a cache kept current).
	RedisSet RedisMode = "set"
)

// DefaultRedisMode is RedisConfig.Mode when left empty.
const DefaultRedisMode = RedisDel

// Defaults of RedisConfig.
const (
	DefaultRedisKey  = "cache:{index}:{id}"
	DefaultRedisName = "cache"
)

// RedisConfig configures a Redis sink.
type RedisConfig struct {
	// Client is the Redis the cache lives in (it may differ from the
	// feed's). The sink never closes it. Set Client or URL, not both.
	Client redis.UniversalClient
	// URL is the cache's Redis (redis://, rediss://, redis-cluster://, …;
	// see redisx.ClientConfig), when Client is nil;
	// the sink opens the client and Close closes it.
	URL string
	// Key is the key template of a document (see KeyTemplate). Default
	// "cache:{index}:{id}" (DefaultRedisKey).
	Key string
	// Mode is RedisDel or RedisSet. Default RedisDel.
	Mode RedisMode
	// TTL is the expiry of keys written in RedisSet mode. Default 0: none.
	TTL time.Duration
	// Name names the sink's fence: two sinks writing the same documents to
	// different keys need different names. Default "cache"
	// (DefaultRedisName).
	Name string
	// FencePrefix starts the names of the fence's hashes, in the cache's
	// Redis: one per index, "<FencePrefix>:<index_uuid>"; with a
	// *redis.ClusterClient one per index and hash slot,
	// "<FencePrefix>:{<tag>}:<index_uuid>", the tag naming the slot of the
	// document's key (idempotency.Config.SlotOf), so that any Key
	// template works in Redis Cluster and the cache spreads over its
	// nodes. Default FenceKey; in Redis Cluster
	// redisx.CacheClusterFencePrefix(Name), escf:fence:<Name> (it must hold
	// no braces there).
	FencePrefix string
	// FenceKey is the single fence hash earlier versions wrote. It is read
	// for documents that have no fence in the new layout
	// (idempotency.Config.Legacy) and never written; an index's fields
	// leave it when the index ends. In Redis Cluster it is read only for
	// keys in its slot, which earlier versions required of every key.
	// Default redisx.CacheFenceKey(Name), escf:{cache}:fence:<Name>.
	FenceKey string
	// FenceEndGrace is how long the fence refuses the events of an index
	// after its index_deleted event (idempotency.Config.EndGrace). Default
	// idempotency.DefaultEndGrace (1h).
	FenceEndGrace time.Duration
	// PositionsKey is the hash, in the cache's Redis, where the sink
	// records how far it applied each stream for each group
	// (redisx.Positions): field "<stream>|<group>", value "<lead> <low>".
	// Default redisx.CachePositionsKey(Name), escf:{cache}:applied:<Name>.
	PositionsKey string
}

// Validate names the first bad field.
func (c RedisConfig) Validate() error {
	_, _, err := c.resolve()
	return err
}

// resolve validates the config and returns it with defaults filled in and
// its key template.
func (c RedisConfig) resolve() (RedisConfig, KeyTemplate, error) {
	switch {
	case c.Client == nil && c.URL == "":
		return c, KeyTemplate{}, errors.New("redis sink config: set Client or URL")
	case c.Client != nil && c.URL != "":
		return c, KeyTemplate{}, errors.New("redis sink config: set Client or URL, not both")
	}
	if c.Key == "" {
		c.Key = DefaultRedisKey
	}
	tpl, err := ParseKeyTemplate(c.Key)
	if err != nil {
		return c, tpl, fmt.Errorf("redis sink config: Key: %w", err)
	}
	switch c.Mode {
	case "":
		c.Mode = DefaultRedisMode
	case RedisDel, RedisSet:
	default:
		return c, tpl, fmt.Errorf("redis sink config: Mode %q: want %q or %q", c.Mode, RedisDel, RedisSet)
	}
	if c.TTL < 0 {
		return c, tpl, fmt.Errorf("redis sink config: TTL = %s: want 0 (no expiry) or more", c.TTL)
	}
	if c.TTL > 0 && c.Mode != RedisSet {
		return c, tpl, fmt.Errorf("redis sink config: TTL = %s is only used in mode %q, Mode is %q", c.TTL, RedisSet, c.Mode)
	}
	if c.Name == "" {
		c.Name = DefaultRedisName
	}
	if strings.ContainsAny(c.Name, "{} \t\r\n") {
		return c, tpl, fmt.Errorf("redis sink config: Name %q: braces and whitespace are not allowed", c.Name)
	}
	if c.FenceKey == "" {
		c.FenceKey = redisx.CacheFenceKey(c.Name)
	}
	if c.PositionsKey == "" {
		c.PositionsKey = redisx.CachePositionsKey(c.Name)
	}
	if c.FenceEndGrace < 0 {
		return c, tpl, fmt.Errorf("redis sink config: FenceEndGrace = %s: want more than 0 (0: %s)", c.FenceEndGrace, idempotency.DefaultEndGrace)
	}
	if redisCluster(c.Client, c.URL) {
		if c.FencePrefix == "" {
			c.FencePrefix = redisx.CacheClusterFencePrefix(c.Name)
		}
		if strings.ContainsAny(c.FencePrefix, "{}") {
			return c, tpl, fmt.Errorf("redis sink config: FencePrefix %q: in Redis Cluster it must hold no braces (each fence key carries the hash tag of its document's slot)", c.FencePrefix)
		}
	} else if c.FencePrefix == "" {
		c.FencePrefix = c.FenceKey
	}
	return c, tpl, nil
}

// redisCluster reports whether the cache is a Redis Cluster: a
// *redis.ClusterClient, or a redis-cluster:// or rediss-cluster:// URL.
func redisCluster(client redis.UniversalClient, url string) bool {
	if client != nil {
		_, ok := client.(*redis.ClusterClient)
		return ok
	}
	return redisx.ClientConfig{URL: url}.Cluster()
}

// Redis keeps a cache in Redis in step with the feed: per document one key
// (from the Key template), deleted (RedisDel) or set to the source JSON
// (RedisSet) on upserts, deleted on deletes. Each write goes through
// idempotency.Fence.ApplyRedis on the document's fence, so the key and
// the fence change in one script: a redelivered or older event (another
// consumer, a reclaim) never overwrites a newer one, and a delete is never
// undone by the upsert it follows. An index_deleted event ends the index's
// fences (idempotency.Fence.EndIndex: their memory is freed, late events
// of the index are refused) but leaves its cache keys: the relay's
// per-document deletes are what clear a dropped index's keys. Snapshot
// markers are acknowledged without a write.
type Redis struct {
	cfg       RedisConfig
	tpl       KeyTemplate
	client    redis.UniversalClient
	owned     bool // client built from URL: Close closes it
	fence     *idempotency.Fence
	gate      handlerGate
	closeOnce sync.Once
}

// NewRedis returns a Redis sink. It does not touch Redis.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	cfg, tpl, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	s := &Redis{cfg: cfg, tpl: tpl, client: cfg.Client}
	if s.client == nil {
		if s.client, err = redisx.NewClient(cfg.URL); err != nil {
			return nil, fmt.Errorf("redis sink config: URL: %w", err)
		}
		s.owned = true
	}
	fc := idempotency.Config{Client: s.client, Prefix: cfg.FencePrefix, Legacy: cfg.FenceKey, EndGrace: cfg.FenceEndGrace}
	if redisCluster(s.client, "") {
		fc.SlotOf = tpl.Key
	}
	if s.fence, err = idempotency.New(fc); err != nil {
		if s.owned {
			s.client.Close()
		}
		return nil, err
	}
	return s, nil
}

// Fence is the sink's fence.
func (s *Redis) Fence() *idempotency.Fence { return s.fence }

// Handler applies the event to its document's key. An event the fence
// refuses is done (nil). Redis errors are retryable; an event with a
// negative seq_no is permanent.
func (s *Redis) Handler() redisx.Handler {
	return func(ctx context.Context, e redisx.Event) error {
		if !s.gate.enter() {
			return ErrClosed
		}
		defer s.gate.leave()
		var effect idempotency.Effect
		key := ""
		switch e.Op {
		case redisx.OpUpsert:
			key = s.tpl.Key(e)
			if s.cfg.Mode == RedisSet {
				effect = idempotency.Set{Key: key, Value: e.Source, TTL: s.cfg.TTL}
			} else {
				effect = idempotency.Del{Keys: []string{key}}
			}
		case redisx.OpDelete:
			key = s.tpl.Key(e)
			effect = idempotency.Del{Keys: []string{key}}
		case redisx.OpIndexDeleted:
			if e.IndexUUID == "" {
				return nil
			}
			if err := s.fence.EndIndex(ctx, e.IndexUUID); err != nil {
				return fmt.Errorf("redis sink: %s %s: %w", e.Op, e.Index, err)
			}
			return nil
		default:
			return nil
		}
		if _, err := s.fence.ApplyRedis(ctx, e, effect); err != nil {
			return fmt.Errorf("redis sink: %s %s: %w", e.Op, key, err)
		}
		return nil
	}
}

var (
	_ redisx.Positions = (*Redis)(nil)
	_ Reconciler       = (*Redis)(nil)
)

// Reconcilable: the fences say which source index (uuid), shard and id
// each key came from, whatever the key template (Reconciler).
func (s *Redis) Reconcilable() error { return nil }

// Held lists the documents whose fence records an upsert of index uuid as
// the last event the sink applied (Reconciler): in set mode their keys
// hold that version, in del mode they were invalidated; either way a
// delete of one the source no longer has removes its key. Documents of an
// older index of the name (another uuid) are not listed: its end
// (index_deleted, or the relay's per-document deletes) cleared them.
func (s *Redis) Held(ctx context.Context, index, uuid string, pageSize int, fn func([]HeldDoc) error) (int64, error) {
	return s.fence.Held(ctx, uuid, pageSize, func(page []idempotency.HeldDoc) error {
		out := make([]HeldDoc, len(page))
		for i, h := range page {
			out[i] = HeldDoc{ID: h.ID, Shard: h.Shard, SeqNo: h.SeqNo}
		}
		return fn(out)
	})
}

// Applied returns the position recorded for (stream, group) in
// PositionsKey: with the cache's data, it goes back when the cache's Redis
// does (redisx.Positions).
func (s *Redis) Applied(ctx context.Context, stream, group string) (redisx.Position, error) {
	v, err := s.client.HGet(ctx, s.cfg.PositionsKey, stream+"|"+group).Result()
	if errors.Is(err, redis.Nil) {
		return redisx.Position{}, nil
	}
	if err != nil {
		return redisx.Position{}, positionsErr(fmt.Errorf("redis sink: read the applied position from %s: %w", s.cfg.PositionsKey, err))
	}
	lead, low, _ := strings.Cut(v, " ")
	return redisx.Position{Lead: lead, Low: low}, nil
}

// Advance raises the recorded position (redisx.Positions).
func (s *Redis) Advance(ctx context.Context, stream, group string, p redisx.Position, since string) error {
	v, err := advancePositionScript.Run(ctx, s.client, []string{s.cfg.PositionsKey}, stream+"|"+group, p.Lead, p.Low, since).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return positionsErr(fmt.Errorf("redis sink: record the applied position in %s: %w", s.cfg.PositionsKey, err))
	}
	held, _ := v.(string)
	lead, low, _ := strings.Cut(held, " ")
	return &redisx.BehindError{Store: "the cache's Redis (" + s.cfg.PositionsKey + ")", Recorded: redisx.Position{Lead: lead, Low: low}, Since: since}
}

// Reset sets the recorded position (redisx.Positions).
func (s *Redis) Reset(ctx context.Context, stream, group string, p redisx.Position) error {
	if err := s.client.HSet(ctx, s.cfg.PositionsKey, stream+"|"+group, p.Lead+" "+p.Low).Err(); err != nil {
		return positionsErr(fmt.Errorf("redis sink: reset the applied position in %s: %w", s.cfg.PositionsKey, err))
	}
	return nil
}

// positionsErr marks a refusal of the cache's Redis (NOPERM: the user may
// not use PositionsKey) permanent: retrying cannot help.
func positionsErr(err error) error {
	if redisx.IsNoPerm(err) {
		return redisx.Permanent(err)
	}
	return err
}

// advancePositionScript raises field ARGV[1] of hash KEYS[1] ("<lead>
// <low>") to lead ARGV[2] and low ARGV[3]. If ARGV[4] is not "" and the
// lead held was below it, it returns what was held (the store lost
// writes); nil otherwise.
var advancePositionScript = redis.NewScript(redisx.LuaLessID + `
local v = redis.call('HGET', KEYS[1], ARGV[1]) or ''
local lead, low = string.match(v, '^(%S*) ?(%S*)$')
lead = lead or ''
low = low or ''
local nl, nw = lead, low
if less(lead, ARGV[2]) then nl = ARGV[2] end
if less(low, ARGV[3]) then nw = ARGV[3] end
redis.call('HSET', KEYS[1], ARGV[1], nl .. ' ' .. nw)
if ARGV[4] ~= '' and less(lead, ARGV[4]) then return v end
return false`)

// Close waits for handlers in flight, then closes the client if the sink
// opened it (from URL). Later handler calls return ErrClosed.
func (s *Redis) Close(ctx context.Context) error {
	err := s.gate.close(ctx)
	if s.owned {
		s.closeOnce.Do(func() {
			if cerr := s.client.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("redis sink: close client: %w", cerr)
			}
		})
	}
	return err
}
