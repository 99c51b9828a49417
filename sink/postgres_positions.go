package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/es-changefeed/es-changefeed/redisx"
)

var _ redisx.Positions = (*Postgres)(nil)

// Applied reads the position recorded for (stream, group) in
// escf__applied (redisx.Positions): in the database that holds the rows,
// so a PostgreSQL restored from a backup or failed over to a replica that
// lagged goes back with them.
func (s *Postgres) Applied(ctx context.Context, stream, group string) (redisx.Position, error) {
	if err := s.ensureState(ctx); err != nil {
		return redisx.Position{}, pgPositionsErr(err)
	}
	var p redisx.Position
	err := s.pool.QueryRow(ctx, s.sql.applied, stream, group).Scan(&p.Lead, &p.Low)
	if errors.Is(err, pgx.ErrNoRows) {
		return redisx.Position{}, nil
	}
	if err != nil {
		return redisx.Position{}, pgPositionsErr(fmt.Errorf("postgres sink: read the applied position from %s: %w", PostgresAppliedTable, err))
	}
	return p, nil
}

// Advance raises the recorded position (redisx.Positions), in one
// transaction that locks the row: concurrent consumers of a group raise
// it in turn, neither id ever goes down.
func (s *Postgres) Advance(ctx context.Context, stream, group string, p redisx.Position, since string) error {
	if err := s.ensureState(ctx); err != nil {
		return pgPositionsErr(err)
	}
	var behind error
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		behind = nil
		if _, err := tx.Exec(ctx, s.sql.advanceRow, stream, group); err != nil {
			return err
		}
		var cur redisx.Position
		if err := tx.QueryRow(ctx, s.sql.advanceRead, stream, group).Scan(&cur.Lead, &cur.Low); err != nil {
			return err
		}
		if since != "" && redisx.LessID(cur.Lead, since) {
			behind = &redisx.BehindError{Store: "PostgreSQL's " + s.cfg.Schema + "." + PostgresAppliedTable, Recorded: cur, Since: since}
		}
		next := redisx.Position{Lead: redisx.MaxID(cur.Lead, p.Lead), Low: redisx.MaxID(cur.Low, p.Low)}
		if next == cur {
			return nil
		}
		_, err := tx.Exec(ctx, s.sql.advanceWrite, stream, group, next.Lead, next.Low)
		return err
	})
	if err != nil {
		return pgPositionsErr(fmt.Errorf("postgres sink: record the applied position in %s: %w", PostgresAppliedTable, err))
	}
	return behind
}

// Reset sets the recorded position (redisx.Positions).
func (s *Postgres) Reset(ctx context.Context, stream, group string, p redisx.Position) error {
	if err := s.ensureState(ctx); err != nil {
		return pgPositionsErr(err)
	}
	if _, err := s.pool.Exec(ctx, s.sql.reset, stream, group, p.Lead, p.Low); err != nil {
		return pgPositionsErr(fmt.Errorf("postgres sink: reset the applied position in %s: %w", PostgresAppliedTable, err))
	}
	return nil
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
