package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Defaults of TombstonesConfig.
const (
	// DefaultTombstoneKeep is how long a tombstone lasts: far above the
	// delays of redelivery at the consumer's defaults (a reclaim after
	// --min-idle 60s, up to --max-deliveries 10 with backoff: about 15
	// minutes), and long enough for a consumer process stalled for hours.
	DefaultTombstoneKeep = 24 * time.Hour
	// tombstoneBuckets is how many hashes one Keep is spread over.
	tombstoneBuckets = 24
)

// TombstonesConfig configures Tombstones.
type TombstonesConfig struct {
	// Client is the Redis client. Required; the caller closes it.
	Client redis.UniversalClient
	// Prefix starts the names of the hashes:
	// "<Prefix>:<index_uuid>:<bucket>", field "<shard>/<id>" → the order of
	// the document's last delete. In Redis Cluster every hash of a prefix
	// with a hash tag is in its slot (one script reads several of them).
	// Required.
	Prefix string
	// Keep is how long a tombstone lasts at least (it goes between Keep
	// and Keep plus a 24th of it after the delete). Default
	// DefaultTombstoneKeep (24h).
	Keep time.Duration
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Validate names the first bad field.
func (c TombstonesConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("tombstones config: Client is nil")
	case c.Prefix == "":
		return errors.New("tombstones config: Prefix is empty")
	case c.Keep < 0:
		return fmt.Errorf("tombstones config: Keep = %s: want more than 0 (0: %s)", c.Keep, DefaultTombstoneKeep)
	case c.Keep > 0 && c.Keep < tombstoneBuckets*time.Millisecond:
		return fmt.Errorf("tombstones config: Keep = %s: want at least %s", c.Keep, tombstoneBuckets*time.Millisecond)
	}
	return nil
}

// Tombstones remember, for a while, that documents were deleted, for
// sinks whose target forgets it sooner: Elasticsearch keeps a delete's
// version only for index.gc_deletes (60s by default), after which an
// index request with an older external version succeeds and brings the
// document back. A sink records each delete (Record) and asks before each
// upsert (Deleted): an upsert older than a recorded delete of its document
// is skipped, however late it comes, within Keep.
//
// Layout: deletes go to a hash per index and time bucket (a 24th of
// Keep), "<Prefix>:<index_uuid>:<bucket>", each expiring Keep after its
// bucket ends, so memory is bounded by the deletes of the last Keep and
// returns by itself (Redis before 7.4 has no expiry per field). Deleted
// reads the live buckets of the document's index in one script (26 HGET).
// A bucket is chosen by the client's clock: clocks of the consumers that
// share a prefix may differ by up to a bucket.
//
// Record and Deleted are separate round trips from the write they guard:
// an upsert that passed Deleted and then waited longer than the target
// keeps its own tombstone before reaching it (a stalled process) is not
// stopped. Recording a delete before writing it closes the other window.
//
// A Tombstones is safe for concurrent use. Its methods block on Redis and
// honor the context. The scripts call HGET, HSET and PEXPIREAT.
type Tombstones struct {
	client redis.UniversalClient
	prefix string
	keep   time.Duration
	bucket time.Duration
	now    func() time.Time
}

// NewTombstones returns tombstones with cfg. It does not touch Redis.
func NewTombstones(cfg TombstonesConfig) (*Tombstones, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultTombstoneKeep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Tombstones{client: cfg.Client, prefix: cfg.Prefix, keep: cfg.Keep, bucket: cfg.Keep / tombstoneBuckets, now: cfg.Now}, nil
}

// Keep is how long a tombstone lasts at least.
func (t *Tombstones) Keep() time.Duration { return t.keep }

func (t *Tombstones) bucketKey(uuid string, n int64) string {
	return t.prefix + ":" + uuid + ":" + strconv.FormatInt(n, 10)
}

// Record remembers a delete event's order for its document (a higher one
// already there stays). Events other than deletes are not recorded.
func (t *Tombstones) Record(ctx context.Context, e redisx.Event) error {
	if e.Op != redisx.OpDelete {
		return nil
	}
	o, err := Order(e)
	if err != nil {
		return err
	}
	b := t.now().UnixMilli() / t.bucket.Milliseconds()
	key := t.bucketKey(e.IndexUUID, b)
	expireAt := (b+1)*t.bucket.Milliseconds() + t.keep.Milliseconds()
	field := strconv.Itoa(e.Shard) + "/" + e.ID
	if err := tombRecordScript.Run(ctx, t.client, []string{key}, field, strconv.FormatUint(o, 10), strconv.FormatInt(expireAt, 10)).Err(); err != nil {
		return fmt.Errorf("record the delete of %s (order %d) in %s: %w", Identity(e), o, key, scriptErr(err))
	}
	return nil
}

// Deleted reports whether a delete of e's document newer than e is
// recorded: an upsert it reports is older than the document's last
// delete and must not be applied. Events other than upserts and deletes
// are never reported.
func (t *Tombstones) Deleted(ctx context.Context, e redisx.Event) (bool, error) {
	if !Fenced(e) {
		return false, nil
	}
	o, err := Order(e)
	if err != nil {
		return false, err
	}
	now := t.now().UnixMilli()
	bm := t.bucket.Milliseconds()
	first, last := (now-t.keep.Milliseconds())/bm-1, now/bm+1 // a bucket of clock skew either side
	keys := make([]string, 0, last-first+1)
	for b := first; b <= last; b++ {
		keys = append(keys, t.bucketKey(e.IndexUUID, b))
	}
	field := strconv.Itoa(e.Shard) + "/" + e.ID
	n, err := tombReadScript.Run(ctx, t.client, keys, field, strconv.FormatUint(o, 10)).Int()
	if err != nil {
		return false, fmt.Errorf("read the tombstones of %s under %s:%s: %w", Identity(e), t.prefix, e.IndexUUID, scriptErr(err))
	}
	return n == 1, nil
}

// tombRecordScript: KEYS[1] the bucket; ARGV[1] the field, ARGV[2] the
// order, ARGV[3] the bucket's expiry (Unix ms).
var tombRecordScript = redis.NewScript(luaNewer + `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local bad = check(cur)
  if bad then return bad end
end
if not cur or newer(ARGV[2], cur) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1
`)

// tombReadScript: KEYS the buckets; ARGV[1] the field, ARGV[2] the
// event's order. Returns 1 when a bucket holds a newer order.
var tombReadScript = redis.NewScript(luaNewer + `
for _, k in ipairs(KEYS) do
  local cur = redis.call('HGET', k, ARGV[1])
  if cur then
    local bad = check(cur)
    if bad then return bad end
    if newer(cur, ARGV[2]) then return 1 end
  end
end
return 0
`)
