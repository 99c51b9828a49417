package idempotency

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Errors of the package.
var (
	// ErrNotDocument: the event is not about one document (index_deleted,
	// snapshot_*), so it has no order.
	ErrNotDocument = errors.New("event is not about one document")
	// ErrBadSeqNo: a document event with a negative seq_no cannot be
	// ordered. Errors wrapping it are marked redisx.Permanent.
	ErrBadSeqNo = errors.New("seq_no is negative")
	// ErrBadFenceValue: the fence hash holds something that is not an order
	// (another program wrote the field).
	ErrBadFenceValue = errors.New("fence field holds a value that is not an order")
)

// DefaultEndGrace is Config.EndGrace's default: how long the fence of an
// index that ended keeps refusing its late events. An event a consumer
// read before the end is retried or reclaimed within about 15 minutes at
// the consumer's defaults (--min-idle 60s, --max-deliveries 10, backoff);
// an hour is four times that, and short enough for the markers of a large
// index in Redis Cluster (up to 16,384 small keys, about 3 MB) to go soon.
const DefaultEndGrace = time.Hour

// EndedField is the field EndIndex writes into each hash of an ended
// index (the value: when it ended, in Unix milliseconds). A hash holding
// it refuses every event.
const EndedField = "ended"

// Config configures a Fence. Set Prefix (the per-index layout) or Key (the
// single hash of earlier versions), not both.
type Config struct {
	// Client is the Redis client. Required; the caller closes it.
	Client redis.UniversalClient
	// Prefix starts the names of the fence's hashes, e.g.
	// redisx.NewKeys(feed).Fence("mirror"). Each index has its own:
	// "<Prefix>:<index_uuid>", or "<Prefix>:<index_uuid>:<n>" with Shards
	// > 1, or "<Prefix>:{<tag>}:<index_uuid>" with SlotOf. Field
	// "<shard>/<id>" → order. In Redis Cluster the hashes of a prefix with
	// a hash tag share its slot, which the keys of ApplyRedis effects must
	// then share too (see SlotOf for the other way).
	Prefix string
	// Shards splits each index's fences over that many hashes
	// "<Prefix>:<index_uuid>:<n>", n = FNV-1a("<shard>/<id>") mod Shards:
	// smaller hashes, and with a Prefix without a hash tag spread over a
	// Redis Cluster's slots. Fixed for the life of the fence (a document's
	// hash depends on it). Default 1: one hash per index.
	Shards int
	// SlotOf, when set, puts each document's fences in the hash slot of
	// the key it returns for the event: the document's own key (a cache
	// key), so that ApplyRedis's script touches one slot whatever that
	// key is. The hash is "<Prefix>:{<SlotTag(slot)>}:<index_uuid>": per
	// index and slot. Prefix must then hold no braces, and Shards must be
	// 0 or 1 (the slots are the shards).
	SlotOf func(redisx.Event) string
	// Legacy is a single hash of fences written by earlier versions
	// (field "<index_uuid>/<shard>/<id>"): a document without a fence in
	// the new layout is fenced by its field there. It is never written;
	// EndIndex removes the index's fields from it. In Redis Cluster it is
	// read only where it shares the document's slot (earlier versions
	// required that). Default: Prefix itself, where
	// redisx.Keys.Fence(name) kept the hash before. "-": none.
	Legacy string
	// EndGrace is how long EndIndex's markers keep refusing events of an
	// index that ended (late redeliveries, other partitions' lanes), after
	// which they expire and nothing of the index is left. Default
	// DefaultEndGrace (1h). Raise it when a partition's consumers may be
	// down longer, so that its events of an ended index come later.
	EndGrace time.Duration

	// Key is one hash for every fence, field "<index_uuid>/<shard>/<id>".
	//
	// Deprecated: the layout of earlier versions, which grows with every
	// document ever fenced and keeps every fence in one slot. EndIndex
	// removes an index's fields from it with HSCAN. Use Prefix.
	Key string
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("fence config: Client is nil")
	case c.Prefix == "" && c.Key == "":
		return errors.New("fence config: Prefix is empty: use redisx.NewKeys(feed).Fence(name)")
	case c.Prefix != "" && c.Key != "":
		return fmt.Errorf("fence config: set Prefix (%q) or Key (%q), not both", c.Prefix, c.Key)
	case c.Shards < 0:
		return fmt.Errorf("fence config: Shards = %d: want 1 or more (0: 1)", c.Shards)
	case c.EndGrace < 0:
		return fmt.Errorf("fence config: EndGrace = %s: want more than 0 (0: %s)", c.EndGrace, DefaultEndGrace)
	}
	if c.Key != "" {
		switch {
		case c.Shards > 1:
			return fmt.Errorf("fence config: Shards = %d needs Prefix: Key is one hash", c.Shards)
		case c.SlotOf != nil:
			return errors.New("fence config: SlotOf needs Prefix: Key is one hash")
		case c.Legacy != "":
			return errors.New("fence config: Legacy needs Prefix: Key is itself the hash of earlier versions")
		}
	}
	if c.SlotOf != nil {
		if c.Shards > 1 {
			return fmt.Errorf("fence config: Shards = %d with SlotOf: the hash slots are the shards", c.Shards)
		}
		if strings.ContainsAny(c.Prefix, "{}") {
			return fmt.Errorf("fence config: Prefix %q holds a brace: with SlotOf the fence keys carry a hash tag of their own", c.Prefix)
		}
	}
	return nil
}

// Fence is a per-document fence in Redis hashes. It is safe for concurrent
// use.
type Fence struct {
	client  redis.UniversalClient
	cluster bool
	prefix  string
	shards  int
	slotOf  func(redisx.Event) string
	legacy  string
	lslot   int    // Slot(legacy)
	single  string // Config.Key
	grace   time.Duration
	ended   sync.Map // index uuid -> time.Time EndIndex ran in this process
}

// New returns a fence with cfg. It does not touch Redis.
func New(cfg Config) (*Fence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Fence{client: cfg.Client, prefix: cfg.Prefix, shards: max(cfg.Shards, 1), slotOf: cfg.SlotOf,
		legacy: cfg.Legacy, single: cfg.Key, grace: cfg.EndGrace}
	_, f.cluster = cfg.Client.(*redis.ClusterClient)
	switch {
	case f.single != "":
		f.legacy = ""
	case f.legacy == "":
		f.legacy = f.prefix
	case f.legacy == "-":
		f.legacy = ""
	}
	if f.grace == 0 {
		f.grace = DefaultEndGrace
	}
	f.lslot = Slot(f.legacy)
	return f, nil
}

// Key is the single hash of Config.Key, "" for the per-index layout.
//
// Deprecated: use KeyOf.
func (f *Fence) Key() string { return f.single }

// KeyOf is the hash and field that hold the event's document fence.
func (f *Fence) KeyOf(e redisx.Event) (key, field string) {
	if f.single != "" {
		return f.single, Identity(e)
	}
	field = strconv.Itoa(e.Shard) + "/" + e.ID
	switch {
	case f.slotOf != nil:
		return f.slotKey(SlotTag(Slot(f.slotOf(e))), e.IndexUUID), field
	case f.shards > 1:
		return f.shardKey(e.IndexUUID, shardOf(field, f.shards)), field
	}
	return f.prefix + ":" + e.IndexUUID, field
}

func (f *Fence) slotKey(tag, uuid string) string { return f.prefix + ":{" + tag + "}:" + uuid }

func (f *Fence) shardKey(uuid string, n int) string {
	return f.prefix + ":" + uuid + ":" + strconv.Itoa(n)
}

// shardOf is FNV-1a of field mod shards.
func shardOf(field string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(field))
	return int(h.Sum32() % uint32(shards))
}

// indexKeys are every hash the fences of an index can be in.
func (f *Fence) indexKeys(uuid string) []string {
	switch {
	case f.single != "":
		return nil
	case f.slotOf != nil:
		keys := make([]string, Slots)
		for s := range keys {
			keys[s] = f.slotKey(SlotTag(s), uuid)
		}
		return keys
	case f.shards > 1:
		keys := make([]string, f.shards)
		for n := range keys {
			keys[n] = f.shardKey(uuid, n)
		}
		return keys
	}
	return []string{f.prefix + ":" + uuid}
}

// place is where a script finds a document's fence: its hash and field,
// and the legacy hash and field to fall back on ("" = none).
type place struct {
	key, field, legacy, legacyField string
	marked                          bool // the hash may hold EndedField
}

func (f *Fence) place(e redisx.Event) place {
	p := place{marked: f.single == ""}
	p.key, p.field = f.KeyOf(e)
	if f.legacy != "" && (!f.cluster || f.lslot == Slot(p.key)) {
		p.legacy, p.legacyField = f.legacy, Identity(e)
	}
	return p
}

// keys are the script's KEYS[1] (the hash) and KEYS[2] (the legacy hash,
// or the hash again), then extra.
func (p place) keys(extra ...string) []string {
	l := p.legacy
	if l == "" {
		l = p.key
	}
	return append([]string{p.key, l}, extra...)
}

// args are the script's ARGV[1..3]: field, legacy field, "1" when the
// hash may hold EndedField.
func (p place) args(more ...any) []any {
	m := "0"
	if p.marked {
		m = "1"
	}
	return append([]any{p.field, p.legacyField, m}, more...)
}

// endedHere reports whether EndIndex ended the index in this process within
// the grace: its events are refused without asking Redis.
func (f *Fence) endedHere(uuid string) bool {
	v, ok := f.ended.Load(uuid)
	if !ok {
		return false
	}
	if time.Since(v.(time.Time)) > f.grace {
		f.ended.Delete(uuid)
		return false
	}
	return true
}

// Fenced reports whether the event is about one document (upsert, delete)
// and so has an order.
func Fenced(e redisx.Event) bool { return e.Op == redisx.OpUpsert || e.Op == redisx.OpDelete }

// Identity is the document's identity "<index_uuid>/<shard>/<id>": its
// field in the single hash of Config.Key and of Config.Legacy. The id
// comes last, so slashes in it are harmless.
func Identity(e redisx.Event) string {
	return e.IndexUUID + "/" + strconv.Itoa(e.Shard) + "/" + e.ID
}

// Order is the place of a document event in its document's history:
// 2*seq_no for an upsert, 2*seq_no+1 for a delete. Every non-negative
// seq_no fits. The error wraps ErrNotDocument for events that are not
// about one document, or ErrBadSeqNo (marked redisx.Permanent) for a
// negative seq_no.
func Order(e redisx.Event) (uint64, error) {
	if !Fenced(e) {
		return 0, fmt.Errorf("order of %s event: %w", e.Op, ErrNotDocument)
	}
	if e.SeqNo < 0 {
		return 0, redisx.Permanent(fmt.Errorf("order of %s %s seq_no %d: %w", e.Op, Identity(e), e.SeqNo, ErrBadSeqNo))
	}
	o := 2 * uint64(e.SeqNo)
	if e.Op == redisx.OpDelete {
		o++
	}
	return o, nil
}

// Recorded returns the order stored for the event's document (in its
// hash, else in the legacy hash); ok is false when none is. A document of
// an index that ended reads as math.MaxUint64: every order is refused.
func (f *Fence) Recorded(ctx context.Context, e redisx.Event) (order uint64, ok bool, err error) {
	if f.endedHere(e.IndexUUID) {
		return math.MaxUint64, true, nil
	}
	p := f.place(e)
	res, err := readScript.Run(ctx, f.client, p.keys(), p.args()...).Slice()
	if err != nil {
		return 0, false, fmt.Errorf("read fence %s field %s: %w", p.key, p.field, err)
	}
	state, _ := res[0].(int64)
	switch state {
	case 0:
		return 0, false, nil
	case 2:
		return math.MaxUint64, true, nil
	}
	s, _ := res[1].(string)
	order, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("read fence %s field %s = %q: %w", p.key, p.field, s, ErrBadFenceValue)
	}
	return order, true, nil
}

// ShouldApply reports whether the event is newer than anything recorded
// for its document: true when nothing was recorded or the stored order is
// lower, false too when its index ended (EndIndex). Events that are not
// about one document are always applied. It only reads; Record or
// ApplyRedis write.
func (f *Fence) ShouldApply(ctx context.Context, e redisx.Event) (bool, error) {
	if !Fenced(e) {
		return true, nil
	}
	o, err := Order(e)
	if err != nil {
		return false, err
	}
	cur, ok, err := f.Recorded(ctx, e)
	if err != nil {
		return false, err
	}
	return !ok || o > cur, nil
}

// Record stores the event's order for its document if it is greater than
// the stored one (a Lua compare-and-set: it never lowers the order). Events
// that are not about one document, and events of an index that ended, are
// not recorded.
func (f *Fence) Record(ctx context.Context, e redisx.Event) error {
	if !Fenced(e) {
		return nil
	}
	o, err := Order(e)
	if err != nil {
		return err
	}
	if f.endedHere(e.IndexUUID) {
		return nil
	}
	p := f.place(e)
	if err := recordScript.Run(ctx, f.client, p.keys(), p.args(strconv.FormatUint(o, 10))...).Err(); err != nil {
		return fmt.Errorf("record %s order %d in fence %s: %w", Identity(e), o, p.key, scriptErr(err))
	}
	return nil
}

// Middleware skips events the fence has seen (it returns nil, so the pool
// acknowledges them) and records an event after the wrapped handler
// succeeded. After the handler applied an index_deleted event it ends the
// index's fences (EndIndex). If Record or EndIndex fails the event is
// retried and the handler sees it again: the handler must tolerate a
// repeat of the same event. See the package doc for what it does not
// prevent across consumers.
func Middleware(f *Fence) redisx.Middleware {
	return func(next redisx.Handler) redisx.Handler {
		return func(ctx context.Context, e redisx.Event) error {
			ok, err := f.ShouldApply(ctx, e)
			if err != nil || !ok {
				return err
			}
			if err := next(ctx, e); err != nil {
				return err
			}
			if e.Op == redisx.OpIndexDeleted && e.IndexUUID != "" {
				return f.EndIndex(ctx, e.IndexUUID)
			}
			return f.Record(ctx, e)
		}
	}
}

// scriptErr makes a script's BADFENCE reply wrap ErrBadFenceValue.
func scriptErr(err error) error {
	if redis.HasErrorPrefix(err, "BADFENCE") {
		return fmt.Errorf("%w: %w", ErrBadFenceValue, err)
	}
	return err
}
