package sink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// What the sink records of the stream, in the database that holds the
// rows (docs/DESIGN.md §5, "When Redis goes back in time"):
//
//   - escf__applied: the position of redisx.Positions, per (stream,
//     group): a lead written ahead of the entries (Advance, its own
//     transaction, before the pool hands them on) and the group's low
//     water. It is what the pool compares with the feed's Redis.
//   - escf__applied_slots: what the batches applied, written by each
//     batch's own transaction with its rows: per (stream, group) of its
//     events the highest entry id, and one more transaction in this
//     sink's slot. A database restored from an older backup, or a
//     replica promoted, holds exactly the records of the rows it holds.
//     Events that write no row (snapshot markers, index_deleted, those
//     of an index that ended) are not recorded.
//
// One row per (stream, group) and sink — its slot, named at NewPostgres —
// rather than one per (stream, group): every consumer process commits its
// batches without
// waiting for another's row lock (one row shared by all would make their
// commits take turns). A sink's batches are one at a time (group commit),
// so its slot row has one writer. Slots unused for pgSlotFoldAfter fold
// into the empty-named slot (FoldAppliedSlots), so that restarts do not
// grow the table for ever.
//
// The stream and group of an event come from the handler's context
// (redisx.DeliveryOf), which the pool sets: one sink serves the pools of
// every partition (one stream each), so an option naming one stream could
// not say which an event came from, and an event's fields are the feed's
// entry, which names no stream. Events without it (a bootstrap's copy)
// are applied and not recorded.
//
// How the record is used: Applied returns its highest entry as
// Position.Committed (what the rows hold); Advance compares this sink's
// slot with the count its last commit returned, so a database that lost
// transactions this process committed is a *redisx.BehindError even when
// the lead it holds was written before the loss — the pool then hands the
// entries from the low water on again (the fences make repeats harmless).

var _ redisx.Positions = (*Postgres)(nil)

// pgSlotFoldAfter is how long a slot of escf__applied_slots may go
// unused before a purge folds it into the empty-named slot (a sink idle that long and
// then writing again finds its count gone: one harmless replay).
const pgSlotFoldAfter = 7 * 24 * time.Hour

// pgSlotName names a sink's slot: host, process id and 4 random bytes
// (an operator sees which process wrote it; two sinks of one process
// differ).
func pgSlotName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// pgApplied is what a batch records for one stream and group: its
// highest entry id and how many entries it carried.
type pgApplied struct {
	from    redisx.Delivery
	last    string
	entries int64
}

// pgRecordOf is the record of a batch's items (superseded ones too: their
// effect is their successor's), per stream and group, in first-seen
// order. Items without a Delivery or a stream id are not recorded.
func pgRecordOf(items []*pgItem) []pgApplied {
	var out []pgApplied
	for _, it := range items {
		if it.from.Stream == "" || !redisx.ValidID(it.e.StreamID) {
			continue
		}
		i := 0
		for i < len(out) && out[i].from != it.from {
			i++
		}
		if i == len(out) {
			out = append(out, pgApplied{from: it.from, last: it.e.StreamID})
		}
		out[i].last = redisx.MaxID(out[i].last, it.e.StreamID)
		out[i].entries++
	}
	return out
}

// pgHeld is a slot's transaction count as a batch's record returned it.
type pgHeld struct {
	from redisx.Delivery
	tx   int64
}

// queueRecord queues the record of rec in this sink's slot and returns
// where the counts it returns are put when the batch is read.
func (s *Postgres) queueRecord(b *pgx.Batch, rec []pgApplied) *[]pgHeld {
	held := new([]pgHeld)
	if len(rec) == 0 {
		return held
	}
	streams, groups, last := make([]string, len(rec)), make([]string, len(rec)), make([]string, len(rec))
	entries := make([]int64, len(rec))
	for i, r := range rec {
		streams[i], groups[i], last[i], entries[i] = r.from.Stream, r.from.Group, r.last, r.entries
	}
	b.Queue(s.sql.record, s.slot, streams, groups, last, entries).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var h pgHeld
			if err := rows.Scan(&h.from.Stream, &h.from.Group, &h.tx); err != nil {
				return err
			}
			*held = append(*held, h)
		}
		return rows.Err()
	})
	return held
}

// committed takes the slot counts a committed batch returned. A count not
// above the one the previous commit returned means the database lost
// transactions of this slot in between (it went back): said once, and
// kept for Advance to report.
func (s *Postgres) committed(held []pgHeld) {
	for _, h := range held {
		s.mu.Lock()
		prev := s.slotTx[h.from]
		s.slotTx[h.from] = h.tx
		lost := ""
		if h.tx <= prev {
			lost = s.slotLoss(h.from, h.tx-1, prev)
			if _, ok := s.slotLost[h.from]; !ok {
				s.slotLost[h.from] = lost
			}
		}
		s.mu.Unlock()
		if lost != "" {
			s.log.Warn("PostgreSQL lost transactions this sink committed (restored from a backup, or a replica that lagged took over): "+
				"the consumer hands the entries from its low water on again", logkey.Stream, h.from.Stream, logkey.Group, h.from.Group, logkey.Error, lost)
		}
	}
}

// slotLoss says what a slot lost.
func (s *Postgres) slotLoss(from redisx.Delivery, held, committed int64) string {
	return fmt.Sprintf("%s.%s holds %d transactions in slot %s of stream %s and group %s, this process committed %d",
		s.cfg.Schema, PostgresAppliedSlotsTable, held, s.slot, from.Stream, from.Group, committed)
}

// Applied reads the position recorded for (stream, group) in
// escf__applied (redisx.Positions), and as Committed the highest entry
// the batches recorded in escf__applied_slots: in the database that holds
// the rows, so a PostgreSQL restored from a backup or failed over to a
// replica that lagged goes back with them.
func (s *Postgres) Applied(ctx context.Context, stream, group string) (redisx.Position, error) {
	if err := s.ensureState(ctx); err != nil {
		return redisx.Position{}, pgPositionsErr(err)
	}
	var p redisx.Position
	err := s.pool.QueryRow(ctx, s.sql.applied, stream, group).Scan(&p.Lead, &p.Low, &p.Committed)
	if err != nil {
		return redisx.Position{}, pgPositionsErr(fmt.Errorf("postgres sink: read the applied position from %s: %w", PostgresAppliedTable, err))
	}
	return p, nil
}

// Advance raises the recorded position (redisx.Positions), in one
// transaction that locks the row: concurrent consumers of a group raise
// it in turn, neither id ever goes down. It returns a *redisx.BehindError
// (and records p anyway) if the lead held is below since, or if this
// sink's slot of escf__applied_slots holds fewer transactions than its
// commits returned (Lost): the database lost rows this process wrote.
func (s *Postgres) Advance(ctx context.Context, stream, group string, p redisx.Position, since string) error {
	if err := s.ensureState(ctx); err != nil {
		return pgPositionsErr(err)
	}
	from := redisx.Delivery{Stream: stream, Group: group}
	s.mu.Lock()
	mine := s.slotTx[from] // read first: a commit meanwhile only raises what the database holds
	s.mu.Unlock()
	var cur redisx.Position
	var held int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.advanceRow, stream, group); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, s.sql.advanceRead, stream, group, s.slot).Scan(&cur.Lead, &cur.Low, &cur.Committed, &held); err != nil {
			return err
		}
		next := redisx.Position{Lead: redisx.MaxID(cur.Lead, p.Lead), Low: redisx.MaxID(cur.Low, p.Low)}
		if next.Lead == cur.Lead && next.Low == cur.Low {
			return nil
		}
		_, err := tx.Exec(ctx, s.sql.advanceWrite, stream, group, next.Lead, next.Low)
		return err
	})
	if err != nil {
		return pgPositionsErr(fmt.Errorf("postgres sink: record the applied position in %s: %w", PostgresAppliedTable, err))
	}
	s.mu.Lock()
	lost, found := s.slotLost[from]
	delete(s.slotLost, from)
	if !found && held < mine && s.slotTx[from] == mine {
		lost = s.slotLoss(from, held, mine)
		s.slotTx[from] = held
	}
	s.mu.Unlock()
	var behind *redisx.BehindError
	if since != "" && redisx.LessID(cur.Lead, since) {
		behind = &redisx.BehindError{Store: "PostgreSQL's " + s.cfg.Schema + "." + PostgresAppliedTable, Recorded: cur, Since: since}
	}
	if lost != "" {
		if behind == nil {
			behind = &redisx.BehindError{Store: "PostgreSQL's " + s.cfg.Schema, Recorded: cur, Since: since}
		}
		behind.Lost = lost
	}
	if behind == nil {
		return nil
	}
	return behind
}

// Reset sets the recorded position (redisx.Positions). The slots keep
// their records: the entries they name are still applied.
func (s *Postgres) Reset(ctx context.Context, stream, group string, p redisx.Position) error {
	if err := s.ensureState(ctx); err != nil {
		return pgPositionsErr(err)
	}
	if _, err := s.pool.Exec(ctx, s.sql.reset, stream, group, p.Lead, p.Low); err != nil {
		return pgPositionsErr(fmt.Errorf("postgres sink: reset the applied position in %s: %w", PostgresAppliedTable, err))
	}
	return nil
}

// FoldAppliedSlots folds the slots of escf__applied_slots unused for a
// week (those of sinks stopped since; not this sink's) into the empty-named slot of
// their stream and group — the highest last_id, the counts summed — and
// returns how many it folded. The sink calls it with its tombstone purge.
func (s *Postgres) FoldAppliedSlots(ctx context.Context) (int64, error) {
	if err := s.ensureState(ctx); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, s.sql.foldSlots, s.slot, pgSlotFoldAfter.Seconds()).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres sink: fold the slots of %s unused for %s: %w", PostgresAppliedSlotsTable, pgSlotFoldAfter, err)
	}
	return n, nil
}

// pgPositionsErr marks a refusal of PostgreSQL (a privilege missing on
// the sink's tables or schema) permanent: the pool stops, naming it.
func pgPositionsErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return redisx.Permanent(err)
	}
	return err
}
