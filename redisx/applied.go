package redisx

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Position is how far a consumer group's sink got in one stream, as the
// sink records it in a store of its own (a target index, a cache's Redis,
// a file): Lead is an entry id at or above every entry the sink may have
// applied (recorded before they are handed to it); Low an id below which
// every entry the group read was acknowledged, so applied (recorded at the
// same time, from the group's pending list). Either is "" when unknown.
//
// Committed, from a store that records in the same transaction as the
// data which entries that transaction applied (the PostgreSQL sink), is
// the highest entry whose effects the store holds: restored from an older
// backup, the store says exactly what its data holds. Entries below it may
// still be missing (handled out of order, or by several consumers); those
// below Low are not. "" when the store does not record it, or recorded
// nothing.
type Position struct {
	Lead      string `json:"lead"`
	Low       string `json:"low,omitempty"`
	Committed string `json:"committed,omitempty"`
}

// Positions is what a sink that keeps its data outside the feed's Redis
// offers so that a Pool can tell when one of the two went back in time
// (Redis restarted from an append-only file that missed acknowledged
// writes, a failover to a replica that lagged, a target restored from an
// older snapshot):
//
//   - the feed's Redis lost entries the sink applied: the Pool stops with a
//     *StreamRolledBackError (the sink may hold documents deleted since;
//     only a bootstrap makes it exact), unless the relay repaired the loss
//     (a Rollback record covers the entry);
//   - the sink's store lost writes it had made: the Pool hands the entries
//     from the recorded Low on to the sink again (its fences make the
//     repeats harmless), or stops with a history loss if the stream no
//     longer holds them.
//
// Implementations are safe for concurrent use; the store must be as
// durable as the sink's data, and each call durable when it returns.
type Positions interface {
	// Applied returns the position recorded for (stream, group); a zero
	// Position when none is.
	Applied(ctx context.Context, stream, group string) (Position, error)
	// Advance raises the recorded position to p (neither id goes down). If
	// since is not "" and the store holds a Lead below it — a lead this
	// process recorded earlier is gone — it returns a *BehindError with
	// what the store holds, and records p anyway.
	Advance(ctx context.Context, stream, group string, p Position, since string) error
	// Reset sets the recorded position to p, lower or not: a bootstrap
	// positioned the group there.
	Reset(ctx context.Context, stream, group string, p Position) error
}

// BehindError says a sink's store lost writes: it holds an older position
// than one recorded there earlier, or (Lost) fewer of the transactions
// that recorded what they applied than this process committed.
type BehindError struct {
	Store    string // what the store is, for the message
	Recorded Position
	Since    string
	// Lost, when not "", says which of its own writes the store no
	// longer holds although its Lead is not below Since.
	Lost string
}

func (e *BehindError) Error() string {
	const causes = "(restarted from an older append-only file or snapshot, failed over to a replica that lagged, or restored)"
	rows := ""
	if e.Recorded.Committed != "" {
		rows = ", its data entries up to " + e.Recorded.Committed
	}
	if e.Lost != "" {
		return fmt.Sprintf("%s lost writes %s: %s (it holds applied position %s%s)", e.Store, causes, e.Lost, orNone(e.Recorded.Lead), rows)
	}
	return fmt.Sprintf("%s holds applied position %s%s, below %s recorded there earlier: it lost writes %s",
		e.Store, orNone(e.Recorded.Lead), rows, e.Since, causes)
}

func orNone(id string) string {
	if id == "" {
		return "none"
	}
	return id
}

// RollbacksField is the meta-hash field in which the relay records the
// losses of the feed's Redis it repaired: a JSON list of Rollback, newest
// last (at most MaxRollbacks).
const RollbacksField = "rollbacks"

// MaxRollbacks is how many Rollback records the meta hash keeps.
const MaxRollbacks = 16

// Rollback is a loss of the feed's Redis that the relay repaired: Redis
// came back without the entries after After, the relay read the lost
// changes again from the cluster and recorded the documents of the lost
// entries again, so that the delete scans emit the deletes of those gone
// since. Entries consumers applied with ids after After and before Before
// are covered: the stream makes their sinks exact again.
type Rollback struct {
	After  string `json:"after"`
	Before string `json:"before"`
	// Commits is how many of the relay's commits Redis lost; Acknowledged
	// how many of them it had acknowledged (with --wait-replicas: by the
	// replicas too); Documents how many documents they delivered, which the
	// relay recorded again for delete scans.
	Commits      int64     `json:"commits"`
	Acknowledged int64     `json:"acknowledged"`
	Documents    int       `json:"documents"`
	At           time.Time `json:"at"`
}

// Covers reports whether a lost entry id is among the repaired ones.
func (r Rollback) Covers(id string) bool { return lessID(r.After, id) && lessID(id, r.Before) }

// ParseRollbacks reads the meta field RollbacksField ("" is none).
func ParseRollbacks(v string) ([]Rollback, error) {
	if v == "" {
		return nil, nil
	}
	var out []Rollback
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("meta field %s is not a JSON list of rollbacks: %w", RollbacksField, err)
	}
	return out, nil
}

// AppendRollback returns the meta field's value with r added (the oldest
// dropped beyond MaxRollbacks).
func AppendRollback(v string, r Rollback) (string, error) {
	rs, err := ParseRollbacks(v)
	if err != nil {
		rs = nil // a damaged list is replaced: the newest record matters
	}
	rs = append(rs, r)
	if len(rs) > MaxRollbacks {
		rs = rs[len(rs)-MaxRollbacks:]
	}
	b, err := json.Marshal(rs)
	return string(b), err
}

// StreamRolledBackError says the feed's Redis no longer holds an entry a
// group's sink may have applied: Redis lost acknowledged writes and the
// relay did not repair the loss (it was restarted too, or it is a standby
// that never saw them). Documents of the lost entries that were deleted
// since will never get their deletes: the sink may differ from the source
// until the group is re-initialized with a bootstrap. It wraps
// ErrHistoryLost.
type StreamRolledBackError struct {
	Feed, Stream, Group string
	// Applied is the entry the sink may have applied that is gone.
	Applied string
	// LastDelivered is the group's last delivered id; State the stream's.
	LastDelivered string
	State         StreamState
}

func (e *StreamRolledBackError) Error() string {
	return fmt.Sprintf("history lost: the feed's Redis no longer holds entry %s of %s, which consumer group %q may have applied "+
		"(its last delivered id is %s, the stream's last id %s): Redis lost writes it had acknowledged — restarted from an append-only file "+
		"that missed them (appendfsync everysec and a power failure) or failed over to a replica that lagged — and no relay repaired the loss. "+
		"Documents of the lost entries deleted since will never be deleted in the sink; "+BootstrapAdvice,
		e.Applied, e.Stream, e.Group, e.LastDelivered, e.State.LastID)
}

func (e *StreamRolledBackError) Unwrap() error { return ErrHistoryLost }

// NextID is the smallest stream id after id.
func NextID(id string) string {
	ms, seq := splitID(id)
	if seq == math.MaxUint64 {
		return strconv.FormatUint(ms+1, 10) + "-0"
	}
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+1, 10)
}

// PrevID is the largest stream id before id ("0-0" for the first).
func PrevID(id string) string {
	ms, seq := splitID(id)
	switch {
	case seq > 0:
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq-1, 10)
	case ms > 0:
		return strconv.FormatUint(ms-1, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10)
	}
	return "0-0"
}

// luaLessID is a Lua function less(a, b) comparing stream ids ("" and
// malformed ids sort first), for scripts.
const luaLessID = `
local function less(a, b)
  local am, as = string.match(a or '', '^(%d+)-(%d+)$')
  local bm, bs = string.match(b or '', '^(%d+)-(%d+)$')
  if not bm then return false end
  if not am then return true end
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
`

// LuaLessID is luaLessID for scripts of other packages (sinks' stores).
const LuaLessID = luaLessID

// LessID reports whether stream id a sorts before b ("" and malformed ids
// sort first).
func LessID(a, b string) bool { return lessID(a, b) }

// MaxID is the larger of two stream ids.
func MaxID(a, b string) string {
	if lessID(a, b) {
		return b
	}
	return a
}

// IDVersion maps a stream id to a non-negative int64 that orders as the
// ids do (for a store whose only ordered value is a number, such as an
// external version): ms<<21 | seq, seq capped at 2^21-1.
func IDVersion(id string) int64 {
	ms, seq := splitID(id)
	return int64(ms)<<21 | int64(min(seq, 1<<21-1))
}

// ValidID reports whether s looks like a stream id ("<ms>-<seq>").
func ValidID(s string) bool { return validID(s) }

// validID reports whether s looks like a stream id ("<ms>-<seq>").
func validID(s string) bool {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return false
	}
	_, e1 := strconv.ParseUint(a, 10, 64)
	_, e2 := strconv.ParseUint(b, 10, 64)
	return e1 == nil && e2 == nil
}

// ValidPosition checks the ids of a recorded position.
func ValidPosition(p Position) error {
	for _, id := range []string{p.Lead, p.Low, p.Committed} {
		if id != "" && !validID(id) {
			return fmt.Errorf("applied position %+v: %q is not a stream id", p, id)
		}
	}
	return nil
}
