package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

var _ redisx.Positions = (*Bulk)(nil)

// bulkPosition is a document of BulkConfig.PositionsIndex as last read or
// written, with the version a conditional write needs.
type bulkPosition struct {
	pos         redisx.Position
	found       bool
	seqNo, term int64
}

// bulkPositionDoc is the document's source.
type bulkPositionDoc struct {
	Stream string `json:"stream"`
	Group  string `json:"group"`
	Lead   string `json:"lead"`
	Low    string `json:"low,omitempty"`
}

// Applied reads the position recorded for (stream, group) in the target
// (redisx.Positions): with the mirror's data, as durable as it.
func (b *Bulk) Applied(ctx context.Context, stream, group string) (redisx.Position, error) {
	b.posMu.Lock()
	defer b.posMu.Unlock()
	cur, err := b.readPosition(ctx, stream, group)
	return cur.pos, err
}

// Advance raises the recorded position (redisx.Positions): a conditional
// write over the version last read, read again when another consumer
// wrote meanwhile.
func (b *Bulk) Advance(ctx context.Context, stream, group string, p redisx.Position, since string) error {
	b.posMu.Lock()
	defer b.posMu.Unlock()
	k := stream + "|" + group
	for attempt := 0; ; attempt++ {
		cur, ok := b.pos[k]
		if !ok {
			var err error
			if cur, err = b.readPosition(ctx, stream, group); err != nil {
				return err
			}
		}
		next := redisx.Position{Lead: redisx.MaxID(cur.pos.Lead, p.Lead), Low: redisx.MaxID(cur.pos.Low, p.Low)}
		// The document as last read or written by this sink: a target
		// that went back (restored) is seen at the next start, against the
		// feed's copy (the consumer pool).
		var behind error
		if since != "" && redisx.LessID(cur.pos.Lead, since) {
			behind = &redisx.BehindError{Store: "the mirror's " + b.cfg.PositionsIndex + " index", Recorded: cur.pos, Since: since}
		}
		if next == cur.pos && cur.found {
			return behind
		}
		err := b.writePosition(ctx, stream, group, next, cur)
		if errors.Is(err, es.ErrConflict) && attempt < 10 {
			delete(b.pos, k) // another consumer wrote it: read it again
			continue
		}
		if err != nil {
			return err
		}
		return behind
	}
}

// Reset sets the recorded position (redisx.Positions).
func (b *Bulk) Reset(ctx context.Context, stream, group string, p redisx.Position) error {
	b.posMu.Lock()
	defer b.posMu.Unlock()
	for attempt := 0; ; attempt++ {
		cur, err := b.readPosition(ctx, stream, group)
		if err != nil {
			return err
		}
		err = b.writePosition(ctx, stream, group, p, cur)
		if errors.Is(err, es.ErrConflict) && attempt < 10 {
			continue
		}
		return err
	}
}

// readPosition reads the document and caches it. posMu is held.
func (b *Bulk) readPosition(ctx context.Context, stream, group string) (bulkPosition, error) {
	d, err := b.cfg.ES.GetDoc(ctx, b.cfg.PositionsIndex, stream+"|"+group)
	if err != nil {
		return bulkPosition{}, bulkPositionsErr(fmt.Errorf("bulk sink: read the applied position from %s: %w", b.cfg.PositionsIndex, err))
	}
	cur := bulkPosition{found: d.Found, seqNo: d.SeqNo, term: d.PrimaryTerm}
	if d.Found {
		var doc bulkPositionDoc
		if err := json.Unmarshal(d.Source, &doc); err != nil {
			return bulkPosition{}, fmt.Errorf("bulk sink: %s document %s|%s is not an applied position: %v", b.cfg.PositionsIndex, stream, group, err)
		}
		cur.pos = redisx.Position{Lead: doc.Lead, Low: doc.Low}
	}
	b.pos[stream+"|"+group] = cur
	return cur, nil
}

// writePosition writes p over cur (the version it was read or written
// at) and caches it. posMu is held.
func (b *Bulk) writePosition(ctx context.Context, stream, group string, p redisx.Position, cur bulkPosition) error {
	ifSeq := int64(-1)
	if cur.found {
		ifSeq = cur.seqNo
	}
	seq, term, err := b.cfg.ES.PutDoc(ctx, b.cfg.PositionsIndex, stream+"|"+group,
		bulkPositionDoc{Stream: stream, Group: group, Lead: p.Lead, Low: p.Low}, ifSeq, cur.term)
	if err != nil {
		return bulkPositionsErr(fmt.Errorf("bulk sink: record the applied position in %s: %w", b.cfg.PositionsIndex, err))
	}
	b.pos[stream+"|"+group] = bulkPosition{pos: p, found: true, seqNo: seq, term: term}
	return nil
}

// bulkPositionsErr marks a refusal of the target (401, 403: the user may
// not read or write PositionsIndex) permanent: retrying cannot help.
func bulkPositionsErr(err error) error {
	if errors.Is(err, es.ErrUnauthorized) {
		return redisx.Permanent(err)
	}
	return err
}
