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

// Effect is the Redis write ApplyRedis performs when the fence lets an
// event through: Set or Del. A nil Effect records the order only.
type Effect interface {
	// args returns the script's effect keys and ARGV[3..5].
	args() (keys []string, kind, value, ttlMillis string, err error)
}

// Set writes Value to Key (SET), with an expiry when TTL > 0 (PX, rounded
// up to a whole millisecond).
type Set struct {
	Key   string
	Value []byte
	TTL   time.Duration
}

func (s Set) args() ([]string, string, string, string, error) {
	if s.Key == "" {
		return nil, "", "", "", errors.New("set effect: Key is empty")
	}
	if s.TTL < 0 {
		return nil, "", "", "", fmt.Errorf("set effect on %s: TTL = %s: want 0 (no expiry) or more", s.Key, s.TTL)
	}
	ms := (s.TTL + time.Millisecond - 1) / time.Millisecond
	return []string{s.Key}, "set", string(s.Value), strconv.FormatInt(int64(ms), 10), nil
}

// Del deletes Keys (DEL). It needs at least one key.
type Del struct {
	Keys []string
}

func (d Del) args() ([]string, string, string, string, error) {
	if len(d.Keys) == 0 {
		return nil, "", "", "", errors.New("del effect: no Keys")
	}
	for i, k := range d.Keys {
		if k == "" {
			return nil, "", "", "", fmt.Errorf("del effect: Keys[%d] is empty", i)
		}
	}
	return d.Keys, "del", "", "0", nil
}

// ApplyRedis performs effect if the event is newer than its document's
// fence, and records the event's order, in one Lua script: atomically, so
// no other writer can slip between check, effect and record. applied is
// false when the fence already held this order or a higher one (a
// redelivery or an older version), or when the event's index ended
// (EndIndex): nothing was written. Events that are not about one document
// are not fenced: the effect is performed and nothing is recorded; an
// index_deleted event does not end the index's fences here (call EndIndex
// when it has been handled, as Middleware and the Redis sink do).
//
// The fence is checked before any write; if the script fails, nothing was
// recorded and the event can be retried. In Redis Cluster every effect key
// must hash to the slot of the document's fence: with Config.SlotOf
// returning the effect's key it does, whatever the key; otherwise the
// server's CROSSSLOT error is returned as is.
func (f *Fence) ApplyRedis(ctx context.Context, e redisx.Event, effect Effect) (applied bool, err error) {
	var ek []string
	kind, value, ttl := "none", "", "0"
	if effect != nil {
		ek, kind, value, ttl, err = effect.args()
		if err != nil {
			return false, err
		}
	}
	var p place
	order := ""
	if Fenced(e) {
		o, err := Order(e)
		if err != nil {
			return false, err
		}
		if f.endedHere(e.IndexUUID) {
			return false, nil
		}
		p, order = f.place(e), strconv.FormatUint(o, 10)
	} else {
		if len(ek) == 0 {
			return true, nil // nothing to fence, nothing to do
		}
		p = place{key: ek[0]} // field "": the script performs the effect only
	}
	n, err := applyScript.Run(ctx, f.client, p.keys(ek...), p.args(order, kind, value, ttl)...).Int()
	if err != nil {
		if redis.HasErrorPrefix(err, "CROSSSLOT") {
			return false, err
		}
		if order == "" {
			return false, fmt.Errorf("apply %s event (%s): %w", e.Op, kind, err)
		}
		return false, fmt.Errorf("apply %s of %s order %s through fence %s (%s): %w", e.Op, Identity(e), order, p.key, kind, scriptErr(err))
	}
	return n == 1, nil
}
