package redisx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// StreamState is what ReadGroups read of the feed's stream.
type StreamState struct {
	// Length is the entries in the stream (XLEN); EntriesAdded every entry
	// ever added, trimmed and deleted ones included.
	Length, EntriesAdded int64
	// FirstID is the oldest entry still in the stream ("" when empty),
	// LastID the last id ever generated ("0-0" for a new stream).
	FirstID, LastID string
	// MaxDeletedID is the largest id removed with XDEL ("0-0": none).
	MaxDeletedID string
}

// Complete reports whether the stream still holds every entry ever added:
// a group created at "0" would read the whole feed.
func (s StreamState) Complete() bool { return s.EntriesAdded <= s.Length } // fewer: a server that does not count (miniredis)

// GroupState is a consumer group as the feed sees it: what it has not been
// delivered yet (Lag) and what it had not handled and can no longer read
// (Lost). One computation for the metrics, status, the relay's backpressure
// and the consumer pool.
type GroupState struct {
	Name      string
	Consumers int64
	// Pending is entries delivered and not acknowledged; OldestPending the
	// oldest of them ("" when none).
	Pending       int64
	OldestPending string
	// LastDelivered is the group's last delivered id; EntriesRead its
	// logical read counter (-1: Redis does not know it).
	LastDelivered string
	EntriesRead   int64
	// Lag is the entries in the stream after LastDelivered: not yet
	// delivered to the group. Never negative.
	Lag int64
	// LostUnread is entries after LastDelivered that were trimmed or deleted
	// before the group read them; LostPending pending entries whose payload
	// is gone (FirstLostPending the oldest). -1: some are, how many is
	// unknown (Redis lost the group's read counter).
	LostUnread, LostPending int64
	FirstLostPending        string
}

// Lost is the entries the group had not handled that are gone (-1: some,
// how many is unknown). Zero means no history was lost.
func (g GroupState) Lost() int64 {
	if g.LostUnread < 0 || g.LostPending < 0 {
		return -1
	}
	return g.LostUnread + g.LostPending
}

// HistoryLost reports whether the group can no longer see every change.
func (g GroupState) HistoryLost() bool { return g.Lost() != 0 }

// ErrHistoryLost is wrapped by every error that says a consumer group can no
// longer see every change of the feed (see HistoryLostError).
var ErrHistoryLost = errors.New("history lost")

// BootstrapAdvice ends the messages of history losses: what fixes them.
// The CLI replaces it by the command (cmdflags.ExplainLost).
const BootstrapAdvice = "re-initialize the group with a bootstrap"

// HistoryLostError says which entries a group can no longer read (Loss),
// and that a bootstrap re-initializes it. Its message names no command:
// the CLI says which one to run.
type HistoryLostError struct {
	// Feed is the feed's name (for the command to run), Stream its stream.
	Feed   string
	Stream string
	State  StreamState
	Group  GroupState
	// New: the group does not exist yet and would start at "0" on a stream
	// that no longer holds the feed from its start.
	New bool
}

func (e *HistoryLostError) Error() string {
	if e.New {
		return e.Loss() + ". Join with a bootstrap (a copy of the cluster's current documents, then the stream with no gap), or start at $ for new changes only"
	}
	return e.Loss() + ". Its sink misses those changes; re-initialize the group with a bootstrap (a copy of the cluster's current documents, then the stream with no gap)"
}

// Loss says what the group cannot read: the first sentence of Error.
func (e *HistoryLostError) Loss() string {
	s, g := e.State, e.Group
	if e.New {
		return fmt.Sprintf("history lost: the stream %s no longer holds the feed from its start (%d of %d entries ever added were trimmed or deleted; the oldest left is %s), "+
			"so a new group %q starting at 0 would miss them silently", e.Stream, s.EntriesAdded-s.Length, s.EntriesAdded, firstOr(s.FirstID), g.Name)
	}
	var what []string
	switch {
	case g.LostUnread < 0:
		what = append(what, fmt.Sprintf("entries after its last delivered id %s were trimmed or deleted before it read them (Redis lost its read counter: how many is unknown)", g.LastDelivered))
	case g.LostUnread > 0:
		what = append(what, fmt.Sprintf("%d entries after its last delivered id %s were trimmed or deleted before it read them (entries-added %d, entries-read %d, %d left to read; the oldest left is %s)",
			g.LostUnread, g.LastDelivered, s.EntriesAdded, g.EntriesRead, g.Lag, firstOr(s.FirstID)))
	}
	switch {
	case g.LostPending < 0:
		what = append(what, "pending entries are gone from the stream")
	case g.LostPending > 0:
		what = append(what, fmt.Sprintf("%d pending entries are gone from the stream (the oldest %s)", g.LostPending, g.FirstLostPending))
	}
	return fmt.Sprintf("history lost: consumer group %q of %s had not handled entries that are no longer in the stream: %s",
		g.Name, e.Stream, strings.Join(what, "; "))
}

func (e *HistoryLostError) Unwrap() error { return ErrHistoryLost }

func firstOr(id string) string {
	if id == "" {
		return "none: the stream is empty"
	}
	return id
}

// ReadStream reads the stream's counters. A missing stream is empty and
// complete.
func ReadStream(ctx context.Context, rdb redis.UniversalClient, stream string) (StreamState, error) {
	info, err := rdb.XInfoStream(ctx, stream).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "no such key") {
			return StreamState{LastID: "0-0", MaxDeletedID: "0-0"}, nil
		}
		return StreamState{}, fmt.Errorf("XINFO STREAM %s: %w", stream, err)
	}
	return StreamStateOf(info), nil
}

// StreamStateOf is the StreamState of an XINFO STREAM reply.
func StreamStateOf(info *redis.XInfoStream) StreamState {
	st := StreamState{Length: info.Length, EntriesAdded: info.EntriesAdded, FirstID: info.FirstEntry.ID,
		LastID: info.LastGeneratedID, MaxDeletedID: info.MaxDeletedEntryID}
	if st.MaxDeletedID == "" {
		st.MaxDeletedID = "0-0"
	}
	if st.Length == 0 {
		st.FirstID = ""
	}
	return st
}

// ReadGroups reads the stream and every consumer group of it (none when the
// stream does not exist).
func ReadGroups(ctx context.Context, rdb redis.UniversalClient, stream string) (StreamState, []GroupState, error) {
	infos, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "no such key") {
			return StreamState{LastID: "0-0", MaxDeletedID: "0-0"}, nil, nil
		}
		return StreamState{}, nil, fmt.Errorf("XINFO GROUPS %s: %w", stream, err)
	}
	st, err := ReadStream(ctx, rdb, stream)
	if err != nil {
		return st, nil, err
	}
	out := make([]GroupState, 0, len(infos))
	for _, g := range infos {
		gs, err := groupState(ctx, rdb, stream, st, g)
		if err != nil {
			return st, nil, err
		}
		out = append(out, gs)
	}
	return st, out, nil
}

// ReadGroup is ReadGroups for one group; ok is false when it does not exist.
func ReadGroup(ctx context.Context, rdb redis.UniversalClient, stream, group string) (st StreamState, g GroupState, ok bool, err error) {
	st, gs, err := ReadGroups(ctx, rdb, stream)
	if err != nil {
		return st, g, false, err
	}
	for _, g := range gs {
		if g.Name == group {
			return st, g, true, nil
		}
	}
	return st, GroupState{Name: group}, false, nil
}

// ReadLosses reads the feed's lost hash (Keys.Lost): group -> what the
// consumer that found the group lost history recorded (empty when none
// did). RecordedLoss reads one group's.
func ReadLosses(ctx context.Context, rdb redis.Cmdable, keys Keys) (map[string]string, error) {
	m, err := rdb.HGetAll(ctx, keys.Lost()).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", keys.Lost(), err)
	}
	return m, nil
}

// groupState computes a group's lag and losses from the stream's counters
// and ids (see unread), and its pending entries that are gone.
func groupState(ctx context.Context, rdb redis.UniversalClient, stream string, st StreamState, g redis.XInfoGroup) (GroupState, error) {
	gs, count := unread(st, g)
	if count {
		n, err := countAfter(ctx, rdb, stream, g.LastDeliveredID)
		if err != nil {
			return gs, err
		}
		gs.Lag = n
		if gs.EntriesRead >= 0 {
			gs.LostUnread = max(st.EntriesAdded-gs.EntriesRead-n, 1)
		}
	}
	if g.Pending > 0 {
		p, err := rdb.XPending(ctx, stream, g.Name).Result()
		if err != nil {
			return gs, fmt.Errorf("XPENDING %s %s: %w", stream, g.Name, err)
		}
		gs.OldestPending = p.Lower
		if st.Length == 0 || lessID(p.Lower, st.FirstID) || !lessID(st.MaxDeletedID, p.Lower) {
			n, first, err := lostPending(ctx, rdb, stream, g.Name, st)
			if err != nil {
				return gs, err
			}
			gs.LostPending, gs.FirstLostPending = n, first
		}
	}
	return gs, nil
}

// unread computes a group's lag and its unread entries that are gone from
// one XINFO STREAM and XINFO GROUPS, without reading entries; count says
// XDEL removed an unread entry (LostUnread is then -1, Lag unknown) and
// counting the entries after the last delivered one tells both. Ids decide
// whenever they can, since counters can be stale (a promoted replica of
// Redis 7.0 reports entries-read and entries-added that disagree although
// nothing was lost):
//
//   - the stream's oldest entry at or before the last delivered one, and no
//     XDEL after it: trimming only removes a prefix, which then ends before
//     anything unread, so nothing unread is lost (the relay's safe trimming
//     keeps every group's last delivered entry: the normal case);
//   - an XDEL after the last delivered id removed an entry never delivered;
//   - the oldest entry after the last delivered one: a trim removed entries
//     up to it, and the counters count the unread ones among them:
//     entries-added − entries-read is what the group had left to read, all
//     of the stream's entries are among them, the rest is gone.
//
// A group reads past such a gap without noticing, so the pool checks this
// atomically with each read (Pool.readChecked).
// Unread is unread for a pool that read XINFO STREAM and XINFO GROUPS
// itself (in the MULTI of its read).
func Unread(st StreamState, g redis.XInfoGroup) (GroupState, bool) { return unread(st, g) }

func unread(st StreamState, g redis.XInfoGroup) (gs GroupState, count bool) {
	gs = GroupState{Name: g.Name, Consumers: g.Consumers, Pending: g.Pending, LastDelivered: g.LastDeliveredID, EntriesRead: g.EntriesRead}
	last := g.LastDeliveredID
	if gs.EntriesRead == 0 && last != "0-0" {
		gs.EntriesRead = -1 // go-redis reads Redis's nil as 0; a group that read something counted it
	}
	trimmedPast := st.Length == 0 || lessID(last, st.FirstID)
	switch {
	case lessID(last, st.MaxDeletedID) && !trimmedPast:
		gs.Lag, gs.LostUnread = -1, -1
		return gs, true
	case st.Length == 0 || !lessID(last, st.LastID):
		gs.Lag = 0
	case trimmedPast:
		gs.Lag = st.Length
	case gs.EntriesRead >= 0:
		gs.Lag = min(max(st.EntriesAdded-gs.EntriesRead, 0), st.Length)
	default:
		gs.Lag = -1
		return gs, true // no counter: count
	}
	switch {
	case !trimmedPast:
		gs.LostUnread = 0
	case gs.EntriesRead >= 0:
		gs.LostUnread = max(st.EntriesAdded-gs.EntriesRead-gs.Lag, 0)
	case last == "0-0":
		gs.LostUnread = st.EntriesAdded - st.Length // never read: everything removed was unread
	default:
		gs.LostUnread = -1
	}
	return gs, false
}

// countAfter counts the entries after id, reading ids in pages (only when
// XDEL left holes the counters cannot see past).
func countAfter(ctx context.Context, rdb redis.UniversalClient, stream, id string) (int64, error) {
	var n int64
	for start := "(" + id; ; {
		msgs, err := rdb.XRangeN(ctx, stream, start, "+", 1000).Result()
		if err != nil {
			return 0, fmt.Errorf("XRANGE %s: %w", stream, err)
		}
		n += int64(len(msgs))
		if len(msgs) < 1000 {
			return n, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// lostPending counts the group's pending entries that are gone: older than
// the stream's first entry, or deleted (XDEL) at or before its largest
// deleted id.
func lostPending(ctx context.Context, rdb redis.UniversalClient, stream, group string, st StreamState) (int64, string, error) {
	var n int64
	first := ""
	for start := "-"; ; {
		pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: start, End: "+", Count: 1000}).Result()
		if err != nil {
			return 0, "", fmt.Errorf("XPENDING %s %s: %w", stream, group, err)
		}
		var check []string
		for _, p := range pend {
			switch {
			case st.Length == 0 || lessID(p.ID, st.FirstID):
				n++
				if first == "" {
					first = p.ID
				}
			case !lessID(st.MaxDeletedID, p.ID):
				check = append(check, p.ID)
			}
		}
		if len(check) > 0 {
			cmds, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				for _, id := range check {
					pipe.XRangeN(ctx, stream, id, id, 1)
				}
				return nil
			})
			if err != nil {
				return 0, "", fmt.Errorf("XRANGE %s: %w", stream, err)
			}
			for i, c := range cmds {
				if len(c.(*redis.XMessageSliceCmd).Val()) == 0 {
					n++
					if first == "" || lessID(check[i], first) {
						first = check[i]
					}
				}
			}
		}
		if len(pend) < 1000 {
			return n, first, nil
		}
		start = "(" + pend[len(pend)-1].ID
	}
}

// lessID compares stream ids ("" and malformed ids sort first).
func lessID(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || (am == bm && as < bs)
}

func splitID(id string) (ms, seq uint64) {
	a, b, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(a, 10, 64)
	seq, _ = strconv.ParseUint(b, 10, 64)
	return ms, seq
}

// RecordedLoss is the history loss recorded for the group in the feed's
// lost hash (Keys.Lost) by the consumer that found it ("" if none).
func RecordedLoss(ctx context.Context, rdb redis.UniversalClient, keys Keys, group string) (string, error) {
	v, err := rdb.HGet(ctx, keys.Lost(), group).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}
