package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/redisx"
)

var _ Reconciler = (*Bulk)(nil)

// Reconcilable says whether the sink's IndexTemplate gives each source
// index a target of its own: with {index} (or {index_uuid}) it does; a
// literal template puts every source index into one target, and a document
// there cannot be told apart from another index's.
func (b *Bulk) Reconcilable() error {
	for _, p := range b.tmpl {
		if p.placeholder != "" {
			return nil
		}
	}
	return fmt.Errorf("%w: the bulk sink's index template %q names neither {index} nor {index_uuid}, so every source index is mirrored into one target index",
		ErrNotReconcilable, b.cfg.IndexTemplate)
}

// Held lists the documents the mirror holds for a source index: the target
// index its template names for (index, uuid) is refreshed, then read shard
// by shard from one frozen view each (es.Client.SnapshotShard: a failed
// shard, a timeout or a short listing is an error, never a short list).
// Each document's external version (BulkVersion) gives its generation and
// seq no: the current generation of uuid gives SeqNo, a lower one Older.
// Documents with a version this feed cannot have written for the index (a
// delete bit, generation 0, a generation above uuid's: another writer's)
// are left out. A target index that does not exist holds nothing.
//
// The source of every document is read too (the listing helper returns
// it); the target user needs read, view_index_metadata and maintenance
// (for the refresh) on the target indices.
func (b *Bulk) Held(ctx context.Context, index, uuid string, pageSize int, fn func([]HeldDoc) error) (int64, error) {
	if err := b.Reconcilable(); err != nil {
		return 0, err
	}
	gen, err := b.generation(ctx, uuid)
	if err != nil {
		return 0, err
	}
	target := b.tmpl.expand(redisx.Event{Index: index, IndexUUID: uuid})
	settings, err := b.cfg.ES.Settings(ctx, target)
	if errors.Is(err, es.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list the mirror of %s: %w", index, err)
	}
	if err := b.cfg.ES.Refresh(ctx, target); err != nil {
		return 0, fmt.Errorf("list the mirror of %s: %w", index, err)
	}
	var n int64
	for shard := 0; shard < settings.Shards; shard++ {
		_, err := b.cfg.ES.SnapshotShard(ctx, target, shard, "", pageSize, es.ListingAuto, func(hits []es.Hit) error {
			page := make([]HeldDoc, 0, len(hits))
			for _, h := range hits {
				g, seq := h.Version>>bulkGenShift, (h.Version>>1)&BulkMaxSeqNo
				if h.Version&1 == 1 || g < 1 || g > gen {
					continue
				}
				page = append(page, HeldDoc{ID: h.ID, Routing: h.Routing, Shard: -1, SeqNo: seq, Older: g < gen})
			}
			if len(page) == 0 {
				return nil
			}
			n += int64(len(page))
			return fn(page)
		})
		if err != nil {
			return n, fmt.Errorf("list the mirror of %s (target %s): %w", index, target, err)
		}
	}
	return n, nil
}
