package sink

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

var _ Reconciler = (*Postgres)(nil)

// Reconcilable says whether the table template gives each source index a
// table of its own ({index} or {index_uuid}); a literal template puts every
// source index into one table.
func (s *Postgres) Reconcilable() error {
	if s.tmpl.names("index") || s.tmpl.names("index_uuid") {
		return nil
	}
	return fmt.Errorf("%w: the postgres sink's table template %q names neither {index} nor {index_uuid}, so every source index is kept in one table",
		ErrNotReconcilable, s.cfg.Table)
}

// Held lists the rows of the table of a source index (Reconciler), from
// one snapshot (a REPEATABLE READ transaction, pages by primary key): the
// rows of uuid with their seq_no, and those of an older index of the name
// (a lower generation) as Older. Rows of a newer index, or of one the sink
// has no generation for, are left out. Documents are identified by id and
// routing (Shard -1), the table's key. A table that does not exist holds
// nothing.
func (s *Postgres) Held(ctx context.Context, index, uuid string, pageSize int, fn func([]HeldDoc) error) (int64, error) {
	if err := s.Reconcilable(); err != nil {
		return 0, err
	}
	if err := s.ensureState(ctx); err != nil {
		return 0, err
	}
	gen, err := s.generation(ctx, uuid)
	if err != nil {
		return 0, err
	}
	table, err := s.tableOf(index, uuid)
	if err != nil {
		return 0, err
	}
	q := pgQualified(s.cfg.Schema, table)
	var n int64
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		n = 0
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q).Scan(&exists); err != nil || !exists {
			return err
		}
		// Pages by primary key, from ("", ""): below every row (ids are
		// never empty).
		lastID, lastRouting := "", ""
		for {
			rows, err := tx.Query(ctx, fmt.Sprintf(s.sql.held, q), uuid, lastID, lastRouting, gen, pageSize)
			if err != nil {
				return err
			}
			var page []HeldDoc
			for rows.Next() {
				var h HeldDoc
				var current bool
				if err := rows.Scan(&h.ID, &h.Routing, &h.SeqNo, &current); err != nil {
					return err
				}
				h.Shard, h.Older = -1, !current
				page = append(page, h)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if len(page) == 0 {
				return nil
			}
			n += int64(len(page))
			if err := fn(page); err != nil {
				return err
			}
			if len(page) < pageSize {
				return nil
			}
			lastID, lastRouting = page[len(page)-1].ID, page[len(page)-1].Routing
		}
	})
	if err != nil {
		return n, fmt.Errorf("list the rows of %s in %s: %w", index, q, err)
	}
	return n, nil
}
