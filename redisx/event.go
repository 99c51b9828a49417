package redisx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Op is what happened to a document.
type Op string

// The ops a stream entry can carry.
const (
	OpUpsert        Op = "upsert"
	OpDelete        Op = "delete"
	OpIndexDeleted  Op = "index_deleted"
	OpSnapshotStart Op = "snapshot_start"
	OpSnapshotEnd   Op = "snapshot_end"
)

// Document reports whether the op is about one document (upsert, delete)
// rather than an index or the feed.
func (o Op) Document() bool { return o == OpUpsert || o == OpDelete }

func (o Op) valid() bool {
	switch o {
	case OpUpsert, OpDelete, OpIndexDeleted, OpSnapshotStart, OpSnapshotEnd:
		return true
	}
	return false
}

// Event is one change-feed entry. Its stream fields and JSON form are a
// public contract: consumers in any language read them.
//
// Stream fields (flat, all strings): op, index, index_uuid, shard, id,
// routing (only when set), seq_no, primary_term, version, source (upserts
// only), target (only when set). Ops that are not about one document
// (index_deleted, snapshot_*) carry no shard, id, routing or seq fields.
type Event struct {
	// StreamID is the entry's stream id ("1700000000000-0"); empty before XADD.
	StreamID string
	Op       Op
	// Index is the concrete index name; IndexUUID its uuid.
	Index     string
	IndexUUID string
	Shard     int
	// ID is the document _id; Routing its custom routing, if any.
	ID      string
	Routing string
	// SeqNo, PrimaryTerm and Version describe Source: the document as it was
	// when that operation wrote it. For deletes SeqNo is an ordering stamp
	// (the shard checkpoint at the scan that found the delete).
	SeqNo       int64
	PrimaryTerm int64
	Version     int64
	// Source is the document JSON (upserts only).
	Source json.RawMessage
	// Target is the --index expression that matched the index (for
	// snapshot events: the expressions of the snapshot).
	Target string
	// Counts (snapshot_end only) are the documents the snapshot delivered,
	// by index name.
	Counts map[string]int64
}

// ErrBadEntry wraps every reason a stream entry cannot be decoded.
var ErrBadEntry = errors.New("malformed change-feed entry")

// Values returns the event as XADD field/value pairs, in contract order,
// every value a string.
func (e Event) Values() []any {
	v := e.appendFields(make([]any, 0, 22))
	for i, a := range v {
		switch a := a.(type) {
		case *string:
			v[i] = *a
		case *int:
			v[i] = strconv.Itoa(*a)
		case *int64:
			v[i] = strconv.FormatInt(*a, 10)
		case *sourceArg:
			v[i] = string(*a)
		}
	}
	return v
}

// XAddArgs returns the command XADD stream * with the fields of Values,
// in the same order with the same bytes on the wire, as arguments for Do
// (AppendXAddArgs on a copy of e).
func (e Event) XAddArgs(stream string) []any {
	return e.AppendXAddArgs(make([]any, 0, 27), &stream)
}

// AppendXAddArgs appends the command XADD *stream * with the fields of
// Values (same order, same bytes on the wire) to args, for Do or
// redis.NewStringCmd, and returns the extended slice. Nothing is copied:
// strings and numbers are passed as pointers to e's fields (go-redis
// writes a *string, *int or *int64 as its value) and the source as its
// bytes, so neither e nor *stream may change until the command is written.
// It allocates nothing when args has room (27 arguments at most; a
// snapshot_end's counts are marshalled).
func (e *Event) AppendXAddArgs(args []any, stream *string) []any {
	return e.appendFields(append(args, "xadd", stream, "*"))
}

// appendFields appends the stream fields in contract order, values as
// pointers into e (see AppendXAddArgs); Values resolves them to strings.
func (e *Event) appendFields(v []any) []any {
	v = append(v, "op", e.Op.boxed(), "index", &e.Index, "index_uuid", &e.IndexUUID)
	if e.Op.Document() {
		v = append(v, "shard", &e.Shard, "id", &e.ID)
		if e.Routing != "" {
			v = append(v, "routing", &e.Routing)
		}
		v = append(v, "seq_no", &e.SeqNo, "primary_term", &e.PrimaryTerm, "version", &e.Version)
	}
	if e.Op == OpUpsert || len(e.Source) > 0 {
		v = append(v, "source", (*sourceArg)(&e.Source))
	}
	if e.Target != "" {
		v = append(v, "target", &e.Target)
	}
	if e.Counts != nil {
		c, _ := json.Marshal(e.Counts)
		v = append(v, "counts", string(c))
	}
	return v
}

// sourceArg passes an event's source to go-redis as its bytes: a pointer
// to it boxes without allocating, and go-redis writes what MarshalBinary
// returns, the same bytes as string(source).
type sourceArg json.RawMessage

// MarshalBinary returns the source itself, not a copy.
func (s *sourceArg) MarshalBinary() ([]byte, error) { return *s, nil }

// boxed is the op as an interface value, without an allocation for the
// known ops.
func (o Op) boxed() any {
	switch o {
	case OpUpsert:
		return string(OpUpsert)
	case OpDelete:
		return string(OpDelete)
	case OpIndexDeleted:
		return string(OpIndexDeleted)
	case OpSnapshotStart:
		return string(OpSnapshotStart)
	case OpSnapshotEnd:
		return string(OpSnapshotEnd)
	}
	return string(o)
}

// ParseEvent decodes a stream entry. Unknown fields are ignored (newer
// producers may add some); missing or malformed required fields are an error
// wrapping ErrBadEntry.
func ParseEvent(msg redis.XMessage) (Event, error) {
	e := Event{StreamID: msg.ID}
	str := func(name string, required bool) (string, error) {
		raw, ok := msg.Values[name]
		if !ok {
			if required {
				return "", fmt.Errorf("%w %s: field %q missing", ErrBadEntry, msg.ID, name)
			}
			return "", nil
		}
		s, ok := raw.(string)
		if !ok {
			return "", fmt.Errorf("%w %s: field %q is %T, want a string", ErrBadEntry, msg.ID, name, raw)
		}
		return s, nil
	}
	num := func(name string, required bool) (int64, error) {
		s, err := str(name, required)
		if err != nil || s == "" {
			return 0, err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w %s: field %q = %q is not an integer", ErrBadEntry, msg.ID, name, s)
		}
		return n, nil
	}
	op, err := str("op", true)
	if err != nil {
		return e, err
	}
	e.Op = Op(op)
	if !e.Op.valid() {
		return e, fmt.Errorf("%w %s: unknown op %q", ErrBadEntry, msg.ID, op)
	}
	doc := e.Op == OpUpsert || e.Op == OpDelete
	if e.Index, err = str("index", doc); err != nil {
		return e, err
	}
	if e.IndexUUID, err = str("index_uuid", doc); err != nil {
		return e, err
	}
	// Document fields belong to upsert and delete only (Values writes them
	// for nothing else); on other ops they are unknown fields, ignored.
	if doc {
		shard, err := num("shard", true)
		if err != nil {
			return e, err
		}
		e.Shard = int(shard)
		if e.ID, err = str("id", true); err != nil {
			return e, err
		}
		if e.Routing, err = str("routing", false); err != nil {
			return e, err
		}
		if e.SeqNo, err = num("seq_no", true); err != nil {
			return e, err
		}
		if e.PrimaryTerm, err = num("primary_term", false); err != nil {
			return e, err
		}
		if e.Version, err = num("version", false); err != nil {
			return e, err
		}
	}
	src, err := str("source", e.Op == OpUpsert)
	if err != nil {
		return e, err
	}
	if src != "" {
		if !json.Valid([]byte(src)) {
			return e, fmt.Errorf("%w %s: field \"source\" is not valid JSON", ErrBadEntry, msg.ID)
		}
		e.Source = json.RawMessage(src)
	}
	if e.Target, err = str("target", false); err != nil {
		return e, err
	}
	counts, err := str("counts", e.Op == OpSnapshotEnd)
	if err != nil {
		return e, err
	}
	if counts != "" || e.Op == OpSnapshotEnd { // required: "" is malformed too
		if err := json.Unmarshal([]byte(counts), &e.Counts); err != nil {
			return e, fmt.Errorf("%w %s: field \"counts\" is not a JSON object of integers", ErrBadEntry, msg.ID)
		}
		if e.Counts == nil {
			e.Counts = map[string]int64{}
		}
	}
	return e, nil
}

// MarshalJSON renders the event as one JSON object in contract order:
// {"op","index","index_uuid","shard","id","routing"?,"seq_no","primary_term"?,
// "version"?,"source"?,"target"?}. seq_no is always present, 0 included;
// primary_term and version are left out when zero (deletes); target only
// when it differs from the index (a pattern, alias or data stream matched).
func (e Event) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"op":`)
	writeJSONString(&b, string(e.Op))
	if e.Op.Document() || e.Index != "" {
		b.WriteString(`,"index":`)
		writeJSONString(&b, e.Index)
	}
	if e.Op.Document() || e.IndexUUID != "" {
		b.WriteString(`,"index_uuid":`)
		writeJSONString(&b, e.IndexUUID)
	}
	if e.Op.Document() {
		b.WriteString(`,"shard":`)
		b.WriteString(strconv.Itoa(e.Shard))
		b.WriteString(`,"id":`)
		writeJSONString(&b, e.ID)
		if e.Routing != "" {
			b.WriteString(`,"routing":`)
			writeJSONString(&b, e.Routing)
		}
		b.WriteString(`,"seq_no":`)
		b.WriteString(strconv.FormatInt(e.SeqNo, 10))
		if e.PrimaryTerm != 0 {
			b.WriteString(`,"primary_term":`)
			b.WriteString(strconv.FormatInt(e.PrimaryTerm, 10))
		}
		if e.Version != 0 {
			b.WriteString(`,"version":`)
			b.WriteString(strconv.FormatInt(e.Version, 10))
		}
	}
	if len(e.Source) > 0 {
		b.WriteString(`,"source":`)
		if err := json.Compact(&b, e.Source); err != nil {
			return nil, fmt.Errorf("event %s/%d/%s: source: %w", e.Index, e.Shard, e.ID, err)
		}
	}
	if e.Target != "" && e.Target != e.Index {
		b.WriteString(`,"target":`)
		writeJSONString(&b, e.Target)
	}
	if e.Counts != nil {
		c, err := json.Marshal(e.Counts)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"counts":`)
		b.Write(c)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}

// UnmarshalJSON reads the JSON form written by MarshalJSON.
func (e *Event) UnmarshalJSON(data []byte) error {
	var w struct {
		Op          Op               `json:"op"`
		Index       string           `json:"index"`
		IndexUUID   string           `json:"index_uuid"`
		Shard       int              `json:"shard"`
		ID          string           `json:"id"`
		Routing     string           `json:"routing"`
		SeqNo       int64            `json:"seq_no"`
		PrimaryTerm int64            `json:"primary_term"`
		Version     int64            `json:"version"`
		Source      json.RawMessage  `json:"source"`
		Target      string           `json:"target"`
		Counts      map[string]int64 `json:"counts"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*e = Event{Op: w.Op, Index: w.Index, IndexUUID: w.IndexUUID, Shard: w.Shard, ID: w.ID, Routing: w.Routing,
		SeqNo: w.SeqNo, PrimaryTerm: w.PrimaryTerm, Version: w.Version, Source: w.Source, Target: w.Target, Counts: w.Counts}
	return nil
}
