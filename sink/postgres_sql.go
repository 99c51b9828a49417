package sink

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// The PostgreSQL sink's own tables, in PostgresConfig.Schema. Their names
// start with "escf__": no {index} of a default template can produce one
// (an index name cannot start with '_'); a template that does is refused.
const (
	// PostgresIndicesTable: index_uuid, index_name, table_name,
	// generation, ended_at (set by index_deleted).
	PostgresIndicesTable = "escf__indices"
	// PostgresTombstonesTable: the deletes applied, per (table_name, id,
	// routing): index_uuid, seq_no, deleted_at.
	PostgresTombstonesTable = "escf__tombstones"
	// PostgresAppliedTable: the applied positions (redisx.Positions), per
	// (stream, consumer_group): lead, low.
	PostgresAppliedTable = "escf__applied"
	// PostgresAppliedSlotsTable: what the batches' transactions applied,
	// written by each of them with its rows, per (stream, consumer_group,
	// slot) — a slot is one sink process's row, so that concurrent
	// consumers never wait for each other's: last_id (the highest entry
	// id applied), transactions and entries (how many), updated_at.
	// Slot '' holds the slots folded after a week unused.
	PostgresAppliedSlotsTable = "escf__applied_slots"
)

// PostgresMaxName is the longest name PostgreSQL keeps (NAMEDATALEN - 1
// bytes); longer names are cut by PostgresTableName.
const PostgresMaxName = 63

// pgColumns are the columns of a document table, with the types
// format_type gives them.
var pgColumns = []struct{ name, typ string }{
	{"id", "text"},
	{"routing", "text"},
	{"source", "jsonb"},
	{"seq_no", "bigint"},
	{"primary_term", "bigint"},
	{"version", "bigint"},
	{"index_uuid", "text"},
	{"shard", "integer"},
	{"updated_at", "timestamp with time zone"},
}

// pgTemplate is a parsed PostgresConfig.Table: literal text and the
// placeholders "index" and "index_uuid".
type pgTemplate []bulkTemplatePart

// parsePgTemplate parses a table template, naming every unknown
// placeholder in its error.
func parsePgTemplate(s string) (pgTemplate, error) {
	parts, err := parseTemplate("Table", s)
	if err != nil {
		return nil, err
	}
	t := pgTemplate(parts)
	if len(t) == 0 {
		return nil, errors.New("Table is empty")
	}
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("Table %q is not UTF-8", s)
	}
	return t, nil
}

// names reports whether the template names a placeholder.
func (t pgTemplate) names(placeholder string) bool {
	for _, p := range t {
		if p.placeholder == placeholder {
			return true
		}
	}
	return false
}

// expand is the table name of an index (made safe).
func (t pgTemplate) expand(index, uuid string) string {
	var b strings.Builder
	for _, p := range t {
		switch p.placeholder {
		case "index":
			b.WriteString(index)
		case "index_uuid":
			b.WriteString(uuid)
		default:
			b.WriteString(p.literal)
		}
	}
	return PostgresTableName(b.String())
}

// PostgresTableName makes a table name safe: every character but a
// letter, a digit or '_' becomes '_' (so "logs-2024.01" is
// logs_2024_01), and a name longer than PostgresMaxName bytes, which
// PostgreSQL would cut silently (and two long names would share a
// table), is cut at 54 bytes and ends with '_' and 8 hex digits of the
// SHA-256 of the whole name before it was made safe. Names are quoted in
// every statement, so letters keep their case.
func PostgresTableName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	safe := b.String()
	if len(safe) <= PostgresMaxName {
		return safe
	}
	cut := 54
	for !utf8.RuneStart(safe[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(name))
	return safe[:cut] + "_" + hex.EncodeToString(sum[:4])
}

// tableOf is the table of an index; a template that names one of the
// sink's own tables is an error.
func (s *Postgres) tableOf(index, uuid string) (string, error) {
	t := s.tmpl.expand(index, uuid)
	switch t {
	case PostgresIndicesTable, PostgresTombstonesTable, PostgresAppliedTable, PostgresAppliedSlotsTable:
		return "", fmt.Errorf("the table of index %s would be %s, one of the sink's own tables: change the table template %q", index, t, s.cfg.Table)
	}
	return t, nil
}

// pgQualified is schema.table, quoted.
func pgQualified(schema, table string) string {
	return pgx.Identifier{schema, table}.Sanitize()
}

// pgLockKeys are the advisory lock keys of tables, sorted (every
// transaction takes its locks in the same order: no deadlock between
// sinks).
func pgLockKeys(schema string, tables []string) []int64 {
	keys := make([]int64, 0, len(tables))
	for _, t := range tables {
		keys = append(keys, pgLockKey(schema, t))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// pgLockKey is a table's advisory lock key: 64 bits of FNV-1a of
// "escf-table", schema and table (two tables sharing a key just wait for
// each other).
func pgLockKey(schema, table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("escf-table\x00" + schema + "\x00" + table))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

// pgStatements are the sink's SQL for one schema. deleteRows and upsert
// take the quoted document table as their %s.
type pgStatements struct {
	lock, register, tombstones, deleteRows, upsert string
	createState                                    []string
	ended, endIndex, dropTombstones, purge         string
	held                                           string
	applied, advanceRow, advanceRead, advanceWrite string
	reset                                          string
	record, foldSlots                              string
}

// pgIDOrder is the sort key of a stream id column or expression x, for
// ORDER BY (with dir: "" or " DESC") and row comparisons: (ms, seq) as
// numbers (text would put "9-0" after "10-0").
func pgIDOrder(x, dir string) string {
	return "split_part(" + x + ", '-', 1)::numeric" + dir + ", split_part(" + x + ", '-', 2)::numeric" + dir
}

// newPgStatements writes the statements. Every comparison of a document's
// order follows one rule: within one index uuid, 2·seq_no (+1 for a
// delete); between two uuids (an index and its re-creation), the higher
// generation, looked up in escf__indices.
func newPgStatements(schema string) pgStatements {
	ix := pgQualified(schema, PostgresIndicesTable)
	ts := pgQualified(schema, PostgresTombstonesTable)
	ap := pgQualified(schema, PostgresAppliedTable)
	sl := pgQualified(schema, PostgresAppliedSlotsTable)
	// The highest last_id of a (stream, group): what its rows hold.
	committed := "(SELECT last_id FROM " + sl + " WHERE stream = $1 AND consumer_group = $2 ORDER BY " +
		pgIDOrder("last_id", " DESC") + " LIMIT 1)"
	// Raise a slot's last_id to EXCLUDED's, never lower it.
	raise := "last_id = CASE WHEN (" + pgIDOrder("EXCLUDED.last_id", "") + ") > (" + pgIDOrder("s.last_id", "") + ") THEN EXCLUDED.last_id ELSE s.last_id END"
	gen := func(uuid string) string {
		return "coalesce((SELECT generation FROM " + ix + " WHERE index_uuid = " + uuid + "), 0)"
	}
	st := pgStatements{
		lock: "SELECT pg_advisory_xact_lock($1)",
		register: "INSERT INTO " + ix + " (index_uuid, index_name, table_name, generation) VALUES ($1, $2, $3, $4) " +
			"ON CONFLICT (index_uuid) DO NOTHING",
		createState: []string{
			"CREATE TABLE IF NOT EXISTS " + ix + " (index_uuid text PRIMARY KEY, index_name text NOT NULL, table_name text NOT NULL, " +
				"generation bigint NOT NULL, ended_at timestamptz)",
			"CREATE TABLE IF NOT EXISTS " + ts + " (table_name text NOT NULL, id text NOT NULL, routing text NOT NULL, " +
				"index_uuid text NOT NULL, seq_no bigint NOT NULL, deleted_at timestamptz NOT NULL, PRIMARY KEY (table_name, id, routing))",
			"CREATE TABLE IF NOT EXISTS " + ap + " (stream text NOT NULL, consumer_group text NOT NULL, lead text NOT NULL, " +
				"low text NOT NULL, updated_at timestamptz NOT NULL, PRIMARY KEY (stream, consumer_group))",
			"CREATE TABLE IF NOT EXISTS " + sl + " (stream text NOT NULL, consumer_group text NOT NULL, slot text NOT NULL, " +
				"last_id text NOT NULL, transactions bigint NOT NULL, entries bigint NOT NULL, updated_at timestamptz NOT NULL, " +
				"PRIMARY KEY (stream, consumer_group, slot))",
		},
		// A delete's tombstone: kept when it orders after the one held.
		tombstones: "INSERT INTO " + ts + " AS ts (table_name, id, routing, index_uuid, seq_no, deleted_at) " +
			"SELECT $1, d.id, d.routing, d.index_uuid, d.seq_no, now() " +
			"FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[]) AS d(id, routing, seq_no, index_uuid) " +
			"JOIN " + ix + " g ON g.index_uuid = d.index_uuid AND g.ended_at IS NULL " +
			"ON CONFLICT (table_name, id, routing) DO UPDATE SET index_uuid = EXCLUDED.index_uuid, seq_no = EXCLUDED.seq_no, deleted_at = EXCLUDED.deleted_at " +
			"WHERE CASE WHEN ts.index_uuid = EXCLUDED.index_uuid THEN EXCLUDED.seq_no > ts.seq_no " +
			"ELSE " + gen("EXCLUDED.index_uuid") + " > " + gen("ts.index_uuid") + " END",
		// A delete removes the row when it orders after it: 2d+1 > 2r.
		deleteRows: "DELETE FROM %s AS t " +
			"USING unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS d(id, routing, seq_no, index_uuid) " +
			"JOIN " + ix + " g ON g.index_uuid = d.index_uuid AND g.ended_at IS NULL " +
			"WHERE t.id = d.id AND t.routing = d.routing AND CASE WHEN t.index_uuid = d.index_uuid THEN d.seq_no >= t.seq_no " +
			"ELSE g.generation > " + gen("t.index_uuid") + " END",
		// An upsert is written unless a tombstone orders after it
		// (2t+1 > 2u) or the row does (2r >= 2u).
		upsert: "INSERT INTO %s AS t (id, routing, source, seq_no, primary_term, version, index_uuid, shard, updated_at) " +
			"SELECT u.id, u.routing, u.source, u.seq_no, u.primary_term, u.version, u.index_uuid, u.shard, now() " +
			"FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], $9::int[]) " +
			"AS u(id, routing, source, seq_no, primary_term, version, index_uuid, shard) " +
			"JOIN " + ix + " g ON g.index_uuid = u.index_uuid AND g.ended_at IS NULL " +
			"WHERE NOT EXISTS (SELECT 1 FROM " + ts + " ts WHERE ts.table_name = $1 AND ts.id = u.id AND ts.routing = u.routing " +
			"AND CASE WHEN ts.index_uuid = u.index_uuid THEN ts.seq_no >= u.seq_no ELSE " + gen("ts.index_uuid") + " > g.generation END) " +
			"ON CONFLICT (id, routing) DO UPDATE SET source = EXCLUDED.source, seq_no = EXCLUDED.seq_no, primary_term = EXCLUDED.primary_term, " +
			"version = EXCLUDED.version, index_uuid = EXCLUDED.index_uuid, shard = EXCLUDED.shard, updated_at = EXCLUDED.updated_at " +
			"WHERE CASE WHEN t.index_uuid = EXCLUDED.index_uuid THEN EXCLUDED.seq_no > t.seq_no " +
			"ELSE " + gen("EXCLUDED.index_uuid") + " > " + gen("t.index_uuid") + " END",
		ended: "SELECT ended_at IS NOT NULL FROM " + ix + " WHERE index_uuid = $1",
		endIndex: "INSERT INTO " + ix + " (index_uuid, index_name, table_name, generation, ended_at) VALUES ($1, $2, $3, $4, now()) " +
			"ON CONFLICT (index_uuid) DO UPDATE SET ended_at = coalesce(" + ix + ".ended_at, now())",
		dropTombstones: "DELETE FROM " + ts + " WHERE table_name = $1 AND index_uuid = $2",
		purge:          "DELETE FROM " + ts + " WHERE deleted_at < now() - $1::float8 * interval '1 second'",
		// Held: the rows of an index uuid or of an older one of the name.
		held: "SELECT t.id, t.routing, t.seq_no, t.index_uuid = $1 FROM %s t " +
			"WHERE (t.id, t.routing) > ($2, $3) AND (t.index_uuid = $1 OR " + gen("t.index_uuid") + " BETWEEN 1 AND $4 - 1) " +
			"ORDER BY t.id, t.routing LIMIT $5",
		applied: "SELECT coalesce((SELECT lead FROM " + ap + " WHERE stream = $1 AND consumer_group = $2), ''), " +
			"coalesce((SELECT low FROM " + ap + " WHERE stream = $1 AND consumer_group = $2), ''), coalesce(" + committed + ", '')",
		advanceRow: "INSERT INTO " + ap + " (stream, consumer_group, lead, low, updated_at) VALUES ($1, $2, '', '', now()) ON CONFLICT DO NOTHING",
		// With the position: what the slots' rows hold, and how many
		// transactions this sink's slot ($3) holds.
		advanceRead: "SELECT lead, low, coalesce(" + committed + ", ''), " +
			"coalesce((SELECT transactions FROM " + sl + " WHERE stream = $1 AND consumer_group = $2 AND slot = $3), 0) " +
			"FROM " + ap + " a WHERE stream = $1 AND consumer_group = $2 FOR UPDATE OF a",
		advanceWrite: "UPDATE " + ap + " SET lead = $3, low = $4, updated_at = now() WHERE stream = $1 AND consumer_group = $2",
		reset: "INSERT INTO " + ap + " (stream, consumer_group, lead, low, updated_at) VALUES ($1, $2, $3, $4, now()) " +
			"ON CONFLICT (stream, consumer_group) DO UPDATE SET lead = EXCLUDED.lead, low = EXCLUDED.low, updated_at = EXCLUDED.updated_at",
		// In each batch's transaction: per (stream, group) of its events,
		// this sink's slot ($1) counts one more transaction and its
		// entries, and keeps the highest entry id; it returns the count.
		record: "INSERT INTO " + sl + " AS s (stream, consumer_group, slot, last_id, transactions, entries, updated_at) " +
			"SELECT r.stream, r.consumer_group, $1, r.last_id, 1, r.entries, now() " +
			"FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS r(stream, consumer_group, last_id, entries) " +
			"ON CONFLICT (stream, consumer_group, slot) DO UPDATE SET " + raise + ", transactions = s.transactions + 1, " +
			"entries = s.entries + EXCLUDED.entries, updated_at = EXCLUDED.updated_at " +
			"RETURNING stream, consumer_group, transactions",
		// Slots unused for $2 seconds (but this sink's, $1) fold into
		// slot '' of their (stream, group): highest last_id, summed counts.
		foldSlots: "WITH gone AS (DELETE FROM " + sl + " WHERE slot <> '' AND slot <> $1 AND updated_at < now() - $2::float8 * interval '1 second' " +
			"RETURNING stream, consumer_group, last_id, transactions, entries), " +
			"folded AS (SELECT stream, consumer_group, (array_agg(last_id ORDER BY " +
			pgIDOrder("last_id", " DESC") + "))[1] AS last_id, " +
			"sum(transactions)::bigint AS transactions, sum(entries)::bigint AS entries FROM gone GROUP BY stream, consumer_group), " +
			"base AS (INSERT INTO " + sl + " AS s (stream, consumer_group, slot, last_id, transactions, entries, updated_at) " +
			"SELECT stream, consumer_group, '', last_id, transactions, entries, now() FROM folded " +
			"ON CONFLICT (stream, consumer_group, slot) DO UPDATE SET " + raise + ", transactions = s.transactions + EXCLUDED.transactions, " +
			"entries = s.entries + EXCLUDED.entries, updated_at = EXCLUDED.updated_at) " +
			"SELECT count(*) FROM gone",
	}
	return st
}

// ensureState creates the sink's own tables once per process, under an
// advisory lock (concurrent CREATE TABLE IF NOT EXISTS can fail).
func (s *Postgres) ensureState(ctx context.Context) error {
	s.mu.Lock()
	ready := s.stateReady
	s.mu.Unlock()
	if ready {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.lock, pgLockKey(s.cfg.Schema, "escf__state")); err != nil {
			return err
		}
		for _, q := range s.sql.createState {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "3F000" {
		return redisx.Permanent(fmt.Errorf("create the sink's tables in schema %s: %w (create it: CREATE SCHEMA %s; or pass another schema)",
			s.cfg.Schema, err, pgx.Identifier{s.cfg.Schema}.Sanitize()))
	}
	if err != nil {
		return fmt.Errorf("create the sink's tables in schema %s: %w", s.cfg.Schema, err)
	}
	s.mu.Lock()
	s.stateReady = true
	s.mu.Unlock()
	return nil
}

// PostgresTableError says an existing table cannot hold an index's
// documents: columns missing, of another type, or unknown to the sink, or
// no unique index on (id, routing).
type PostgresTableError struct {
	Table   string
	Missing []string // "name type"
	Wrong   []string // "name: type, want type"
	Other   []string // columns the sink does not write
	NoKey   bool
}

func (e *PostgresTableError) Error() string {
	var parts []string
	if len(e.Missing) > 0 {
		parts = append(parts, "lacks "+strings.Join(e.Missing, ", "))
	}
	if len(e.Wrong) > 0 {
		parts = append(parts, "has "+strings.Join(e.Wrong, "; "))
	}
	if len(e.Other) > 0 {
		parts = append(parts, "has columns the sink does not write: "+strings.Join(e.Other, ", ")+
			" (drop them, or make them generated columns: GENERATED ALWAYS AS (…) STORED)")
	}
	if e.NoKey {
		parts = append(parts, "has no unique index on (id, routing), which the upsert needs")
	}
	return fmt.Sprintf("table %s cannot hold the sink's documents: it %s; use another table (--postgres-table) or fix it", e.Table, strings.Join(parts, "; "))
}

// ensureTable creates the table of index if missing, or checks the one
// there, once per process. An index uuid that ended gets no table (a late
// event must not create again the table its end dropped): ended is true.
func (s *Postgres) ensureTable(ctx context.Context, table, index, uuid string) (ended bool, err error) {
	s.mu.Lock()
	ok := s.tables[table]
	s.mu.Unlock()
	if ok {
		return false, nil
	}
	if err := s.ensureState(ctx); err != nil {
		return false, err
	}
	q := pgQualified(s.cfg.Schema, table)
	var cols []string
	for _, c := range pgColumns {
		col := c.name + " " + c.typ + " NOT NULL"
		if c.name == "routing" {
			col += " DEFAULT ''"
		}
		cols = append(cols, col)
	}
	create := "CREATE TABLE IF NOT EXISTS " + q + " (" + strings.Join(cols, ", ") + ", PRIMARY KEY (id, routing))"
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql.lock, pgLockKey(s.cfg.Schema, table)); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, s.sql.ended, uuid).Scan(&ended)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if ended {
			return nil
		}
		if s.tmpl.names("index") {
			var other string
			err := tx.QueryRow(ctx, "SELECT index_name FROM "+pgQualified(s.cfg.Schema, PostgresIndicesTable)+
				" WHERE table_name = $1 AND index_name <> $2 LIMIT 1", table, index).Scan(&other)
			if err == nil {
				return redisx.Permanent(fmt.Errorf("indices %s and %s both map to table %s (names are made safe: characters other than letters, digits and '_' become '_'): "+
					"add {index_uuid} to the table template %q, or follow one of them", other, index, table, s.cfg.Table))
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		if _, err := tx.Exec(ctx, create); err != nil {
			return err
		}
		return checkPgTable(ctx, tx, q)
	})
	if err != nil {
		var te *PostgresTableError
		if errors.As(err, &te) {
			return false, redisx.Permanent(err)
		}
		return false, fmt.Errorf("create or check table %s: %w", q, err)
	}
	if !ended {
		s.mu.Lock()
		s.tables[table] = true
		s.mu.Unlock()
	}
	return ended, nil
}

// checkPgTable compares a table's columns and unique indices with what
// the sink writes.
func checkPgTable(ctx context.Context, tx pgx.Tx, q string) error {
	rows, err := tx.Query(ctx, "SELECT attname, format_type(atttypid, atttypmod), attgenerated <> '' FROM pg_attribute "+
		"WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum", q)
	if err != nil {
		return err
	}
	have := map[string]string{}
	te := &PostgresTableError{Table: q}
	for rows.Next() {
		var name, typ string
		var generated bool
		if err := rows.Scan(&name, &typ, &generated); err != nil {
			return err
		}
		if generated {
			continue
		}
		have[name] = typ
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, c := range pgColumns {
		typ, ok := have[c.name]
		switch {
		case !ok:
			te.Missing = append(te.Missing, c.name+" "+c.typ)
		case typ != c.typ:
			te.Wrong = append(te.Wrong, fmt.Sprintf("%s %s, want %s", c.name, typ, c.typ))
		}
		delete(have, c.name)
	}
	for name, typ := range have {
		te.Other = append(te.Other, name+" "+typ)
	}
	slices.Sort(te.Other)
	var key bool
	err = tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisunique "+
		"AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = 2 "+
		"AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a "+
		"WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[])) = ARRAY['id', 'routing'])", q).Scan(&key)
	if err != nil {
		return err
	}
	te.NoKey = !key
	if len(te.Missing)+len(te.Wrong)+len(te.Other) > 0 || te.NoKey {
		return te
	}
	return nil
}

// endIndex marks an index uuid ended (its late events are refused), then
// deletes its rows and tombstones, drops its table, or keeps its rows
// (PostgresConfig.IndexDeleted), in one transaction under the table's
// lock.
func (s *Postgres) endIndex(ctx context.Context, e redisx.Event) error {
	if err := s.ensureState(ctx); err != nil {
		return err
	}
	table, err := s.tableOf(e.Index, e.IndexUUID)
	if err != nil {
		return redisx.Permanent(err)
	}
	gen, err := s.generation(ctx, e.IndexUUID)
	if errors.Is(err, ErrNoGeneration) {
		gen = 0 // an index the feed forgot: ended all the same
	} else if err != nil {
		return err
	}
	q := pgQualified(s.cfg.Schema, table)
	dropped := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		dropped = false
		if _, err := tx.Exec(ctx, s.sql.lock, pgLockKey(s.cfg.Schema, table)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.endIndex, e.IndexUUID, e.Index, table, gen); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.dropTombstones, table, e.IndexUUID); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", q).Scan(&exists); err != nil || !exists {
			return err
		}
		switch s.cfg.IndexDeleted {
		case PostgresKeepRows:
			return nil
		case PostgresDropTable:
			var others bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+q+" WHERE index_uuid <> $1)", e.IndexUUID).Scan(&others); err != nil {
				return err
			}
			if !others {
				_, err := tx.Exec(ctx, "DROP TABLE "+q)
				dropped = err == nil
				return err
			}
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+q+" WHERE index_uuid = $1", e.IndexUUID)
		return err
	})
	if err != nil {
		return err
	}
	if dropped {
		s.mu.Lock()
		delete(s.tables, table)
		s.mu.Unlock()
	}
	return nil
}

// PurgeTombstones deletes the tombstones of deletes applied more than
// TombstoneKeep ago and returns how many it deleted. The sink calls it
// about every TombstoneKeep/24; a tombstone purged too early lets an
// upsert older than its delete, applied later, bring the row back.
func (s *Postgres) PurgeTombstones(ctx context.Context) (int64, error) {
	if err := s.ensureState(ctx); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.sql.purge, s.cfg.TombstoneKeep.Seconds())
	if err != nil {
		return 0, fmt.Errorf("postgres sink: purge tombstones older than %s: %w", s.cfg.TombstoneKeep, err)
	}
	return tag.RowsAffected(), nil
}

// purgeDue purges the tombstones and folds the unused applied slots when
// TombstoneKeep/24 passed since the last purge (the flushing goroutine
// calls it after a commit).
func (s *Postgres) purgeDue(ctx context.Context) {
	if time.Since(s.lastPurge) < s.cfg.TombstoneKeep/24 {
		return
	}
	s.lastPurge = time.Now()
	if _, err := s.PurgeTombstones(ctx); err != nil {
		s.log.Warn("cannot purge old tombstones; trying again later", logkey.Error, err.Error())
	}
	if _, err := s.FoldAppliedSlots(ctx); err != nil {
		s.log.Warn("cannot fold the unused slots of "+PostgresAppliedSlotsTable+"; trying again later", logkey.Error, err.Error())
	}
}
