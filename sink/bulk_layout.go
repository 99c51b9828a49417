package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// Errors of the bulk mirror's layout check (the handler returns them
// wrapped with redisx.Permanent, for events with custom routing only).
var (
	// ErrLayoutMismatch: the target index does not place (id, routing)
	// pairs on shards as the source index does, so two source documents
	// could become one in the mirror (see BulkLayoutError).
	ErrLayoutMismatch = errors.New("the target index does not place documents as the source index does")
	// ErrNoLayout: the feed has no layout for the source index (a relay
	// before layouts recorded it, it could not read it, or it forgot the
	// index when the index was deleted), so the target cannot be checked.
	ErrNoLayout = errors.New("the source index's layout is not recorded")
)

// BulkLayoutError is an event with custom routing refused because its
// target index cannot place documents as its source index does. It names
// both layouts and what to do.
type BulkLayoutError struct {
	Index, IndexUUID, Target string
	// Source and TargetLayout describe the two indices; Fix says how to
	// get a target that mirrors exactly.
	Source, TargetLayout, Fix string
	Err                       error // ErrLayoutMismatch or ErrNoLayout
}

func (e *BulkLayoutError) Error() string {
	return fmt.Sprintf("%v: source %s (uuid %s): %s; target %s: %s; two source documents with one _id and different routings could become one in the mirror, "+
		"so events with custom routing are refused (events without routing are mirrored): %s", e.Err, e.Index, e.IndexUUID, e.Source, e.Target, e.TargetLayout, e.Fix)
}

func (e *BulkLayoutError) Unwrap() error { return e.Err }

// esModRoutingVersion is IndexVersions.MOD_ROUTING_FUNCTION (9_064_0_00):
// Elasticsearch routes the indices created on this index version or later
// (Elasticsearch 9.4+) by RoutingFunction.moduloNumberOfShards,
// floorMod(hash, number_of_shards), and older indices (and every OpenSearch
// index) by legacyRoutingNumberOfShards, floorMod(hash, routing_num_shards)
// / routing_factor (routing_factor = routing_num_shards / number_of_shards).
// Read in elastic/elasticsearch: server/src/main/java/org/elasticsearch/
// cluster/routing/RoutingFunction.java (the two functions), index/
// IndexVersions.java (MOD_ROUTING_FUNCTION = def(9_064_0_00, …)), and the
// choice by the index's creation version (resharding refuses "a index …
// with a version prior to MOD_ROUTING_FUNCTION"); the emulator's ES 9.5
// flavor and its golden recordings from a real 9.5.3 node agree.
// IndexRouting hashes with murmur3 the routing (or the _id when there is
// none), and a partitioned index adds floorMod(hash(_id), partition size)
// to the routing's hash.
const esModRoutingVersion = 9_064_0_00

// shardPlacement is how an index turns a document's hash into a shard:
// floorMod(hash + partition offset, mod) / (mod / shards).
type shardPlacement struct {
	shards, mod, partition int
	bySource               bool // index.routing_path: by source fields
}

func placementOf(l *checkpoint.IndexLayout) shardPlacement {
	p := shardPlacement{shards: l.Shards, mod: l.RoutingShards, partition: max(l.RoutingPartitionSize, 1), bySource: len(l.RoutingPath) > 0}
	if l.Engine == "elasticsearch" && l.VersionCreated >= esModRoutingVersion || p.mod < p.shards {
		p.mod = p.shards
	}
	return p
}

// samePlacement says whether two indices make the same documents of the
// same (id, routing) pairs: one shard each (everything is one shard), or
// the same shard count, function and partition size.
func samePlacement(src, dst *checkpoint.IndexLayout) bool {
	a, b := placementOf(src), placementOf(dst)
	if a.shards == 1 && b.shards == 1 {
		return true
	}
	return !a.bySource && !b.bySource && a == b
}

// modRouting says whether the layout's engine routes by hash modulo shards.
func modRouting(l *checkpoint.IndexLayout) bool {
	return l.Engine == "elasticsearch" && l.VersionCreated >= esModRoutingVersion
}

// describeLayout renders a layout for messages.
func describeLayout(l *checkpoint.IndexLayout) string {
	engine := "Elasticsearch"
	if l.Engine == "opensearch" {
		engine = "OpenSearch"
	}
	if l.EngineVersion != "" {
		engine += " " + l.EngineVersion
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s index (index.version.created %d), %d shard", engine, l.VersionCreated, l.Shards)
	if l.Shards != 1 {
		b.WriteString("s")
	}
	p := placementOf(l)
	switch {
	case p.bySource:
		fmt.Fprintf(&b, ", placed by the source fields of index.routing_path %v", l.RoutingPath)
	case modRouting(l):
		fmt.Fprintf(&b, ", shard = floorMod(hash, %d) (Elasticsearch 9.4+ routing)", l.Shards)
	default:
		fmt.Fprintf(&b, ", %d routing shards: shard = floorMod(hash, %d) / %d", l.RoutingShards, p.mod, p.mod/max(p.shards, 1))
	}
	if p.partition > 1 {
		fmt.Fprintf(&b, ", routing_partition_size %d", p.partition)
	}
	return b.String()
}

// routingShardsFor is the index.number_of_routing_shards a copy of src
// needs where routing uses it (Elasticsearch before 9.4, OpenSearch): src's
// own, or its shard count when src routes by hash modulo shards (a legacy
// index with as many routing shards as shards routes the same way).
func routingShardsFor(src *checkpoint.IndexLayout) int {
	if modRouting(src) || src.RoutingShards < src.Shards {
		return src.Shards
	}
	return src.RoutingShards
}

// createBody is the PUT /<target> body that copies src: its shard count,
// routing shards, routing partition size and mappings. A data stream's
// backing index carries the meta field _data_stream_timestamp, which only
// backing indices may have; it has nothing to do with document identity
// and is left out.
func createBody(src *checkpoint.IndexLayout) map[string]any {
	settings := map[string]any{"index.number_of_shards": src.Shards, "index.number_of_routing_shards": routingShardsFor(src)}
	if src.RoutingPartitionSize > 1 {
		settings["index.routing_partition_size"] = src.RoutingPartitionSize
	}
	body := map[string]any{"settings": settings}
	if m := mappingsForCopy(src.Mappings); m != nil {
		body["mappings"] = m
	}
	return body
}

func mappingsForCopy(raw json.RawMessage) map[string]json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return nil
	}
	delete(m, "_data_stream_timestamp")
	return m
}

// layoutFix says how to get a target that places documents as src does.
func layoutFix(src, dst *checkpoint.IndexLayout, target string) string {
	if len(src.RoutingPath) > 0 {
		return "the source places documents by the fields of index.routing_path, which custom routing cannot reproduce: mirror it into a one-shard target, or without routing"
	}
	settings := fmt.Sprintf(`{"index.number_of_shards":%d,"index.number_of_routing_shards":%d`, src.Shards, routingShardsFor(src))
	if src.RoutingPartitionSize > 1 {
		settings += fmt.Sprintf(`,"index.routing_partition_size":%d`, src.RoutingPartitionSize)
	}
	settings += "}"
	if dst != nil && modRouting(dst) && !modRouting(src) && src.Shards > 1 && routingShardsFor(src) != src.Shards {
		return fmt.Sprintf("Elasticsearch 9.4+ routes every index it creates by floorMod(hash, number_of_shards), and no such index places documents as the source does: "+
			"mirror into OpenSearch or Elasticsearch before 9.4, into an index created with the settings %s", settings)
	}
	return fmt.Sprintf("delete the target index %s and let the sink create it (it copies the source's shards, routing shards, partition size and mappings), "+
		"or create it yourself with the settings %s (an index template can set them)", target, settings)
}

// layoutRetry is how long the sink waits before it reads again a source
// record without a layout, or a target it could not read.
const layoutRetry = time.Minute

// bulkSource is what the sink knows of a source index: its layout, or why
// there is none (until retryAt).
type bulkSource struct {
	info    checkpoint.IndexInfo
	found   bool
	retryAt time.Time // zero once info has a layout: final
}

// bulkTarget is what the sink knows of a target index.
type bulkTarget struct {
	mu      sync.Mutex
	layout  *checkpoint.IndexLayout // nil: unknown, see why
	why     string
	retryAt time.Time // zero once layout is known: final
}

// sourceInfo returns the feed's record of e's index, from the partition
// of e's shard (cached: a layout never changes; a record without one is
// read again after layoutRetry, so an upgraded relay's is picked up).
func (b *Bulk) sourceInfo(ctx context.Context, e redisx.Event) (*bulkSource, error) {
	b.mu.Lock()
	s, ok := b.sources[e.IndexUUID]
	b.mu.Unlock()
	if ok && (s.retryAt.IsZero() || time.Now().Before(s.retryAt)) {
		return s, nil
	}
	store := b.stores[redisx.Partition(e.IndexUUID, e.Shard, len(b.stores))]
	info, found, err := store.Index(ctx, e.IndexUUID)
	if err != nil {
		return nil, err
	}
	s = &bulkSource{info: info, found: found}
	if !found || info.Layout == nil {
		s.retryAt = time.Now().Add(layoutRetry)
		why := "recorded by a relay that did not record layouts (before this version, or without the privileges to read them)"
		if !found {
			why = "not in the feed's records (a deleted index the relay forgot, or not this feed's Redis or partition count)"
		}
		b.warnOnce("source:"+e.IndexUUID, "the feed has no layout for the index: its events with custom routing are refused until a relay records it (it does when it adopts the index again: upgrade and restart the relay)",
			logkey.Index, e.Index, logkey.IndexUUID, e.IndexUUID, logkey.Reason, why)
	}
	b.mu.Lock()
	b.sources[e.IndexUUID] = s
	b.mu.Unlock()
	return s, nil
}

// target returns what the sink knows of a target index, reading its layout
// once, and creating it from src's layout when it does not exist (then
// reading it back: an index template may have changed what was asked).
// Without a source layout a missing target is left to _bulk's
// auto-creation, as before layouts. Errors are those of the reads and the
// creation (retryable or not as es.Error says); a target whose layout the
// sink's user may not read is a nil layout with a reason.
func (b *Bulk) target(ctx context.Context, name string, src *checkpoint.IndexLayout) (*bulkTarget, error) {
	b.mu.Lock()
	t, ok := b.targets[name]
	if !ok {
		t = &bulkTarget{}
		b.targets[name] = t
	}
	b.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.layout != nil || (!t.retryAt.IsZero() && time.Now().Before(t.retryAt)) {
		return t, nil
	}
	l, err := b.cfg.ES.IndexLayout(ctx, name)
	if errors.Is(err, es.ErrNotFound) && src != nil {
		cerr := b.cfg.ES.CreateIndex(ctx, name, createBody(src))
		var ee *es.Error
		switch {
		case cerr == nil:
			b.log.Info("created the target index with the source's layout", logkey.Target, name, logkey.SourceLayout, describeLayout(src))
		case errors.As(cerr, &ee) && ee.Type == "resource_already_exists_exception":
			// Another consumer created it first.
		case errors.Is(cerr, es.ErrUnauthorized):
			t.why, t.retryAt = fmt.Sprintf("the sink may not create it (%v): grant the bulk user create_index on it, or create it yourself", cerr), time.Now().Add(layoutRetry)
			b.log.Warn("cannot create the target index: its events with custom routing are refused", logkey.Target, name, logkey.Error, cerr)
			return t, nil
		case errors.As(cerr, &ee) && !ee.Temporary():
			return nil, redisx.Permanent(fmt.Errorf("create the target index %s with the source's layout (%s): %w; create it yourself with settings that keep the layout", name, describeLayout(src), cerr))
		default:
			return nil, fmt.Errorf("create the target index %s: %w", name, cerr)
		}
		l, err = b.cfg.ES.IndexLayout(ctx, name)
	}
	switch {
	case errors.Is(err, es.ErrNotFound):
		t.why, t.retryAt = "it does not exist yet", time.Now().Add(layoutRetry)
		return t, nil
	case errors.Is(err, es.ErrUnauthorized):
		t.why, t.retryAt = fmt.Sprintf("the sink may not read its layout (%v): grant the bulk user the cluster privilege monitor and view_index_metadata on it", err), time.Now().Add(layoutRetry)
		b.log.Warn("cannot read the target index's layout: its events with custom routing are refused", logkey.Target, name, logkey.Error, err)
		return t, nil
	case err != nil:
		return nil, fmt.Errorf("read the layout of the target index %s: %w", name, err)
	}
	t.layout = &checkpoint.IndexLayout{Shards: l.Shards, RoutingShards: l.RoutingShards, RoutingPartitionSize: l.RoutingPartitionSize,
		RoutingPath: l.RoutingPath, Engine: l.Engine, EngineVersion: l.EngineVersion, VersionCreated: l.VersionCreated}
	t.why, t.retryAt = "", time.Time{}
	return t, nil
}

// checkLayout decides whether e may be written into its target: events
// without custom routing always may (a document's _id alone places it, in
// the source as in any target); an event with routing only into a target
// that places (id, routing) pairs as its source index does. A missing
// target is created from the source's layout first, whatever the event.
// It returns a permanent *BulkLayoutError for a refused event, and the
// read and creation errors.
func (b *Bulk) checkLayout(ctx context.Context, e redisx.Event, target string) error {
	src, err := b.sourceInfo(ctx, e)
	if err != nil {
		return err
	}
	srcLayout := src.info.Layout
	if srcLayout == nil && e.Routing == "" {
		return nil // as before layouts: _bulk creates a missing target
	}
	t, err := b.target(ctx, target, srcLayout)
	if err != nil {
		return err
	}
	if e.Routing == "" {
		return nil
	}
	t.mu.Lock()
	dst, why := t.layout, t.why
	t.mu.Unlock()
	refuse := func(cause error, source, tl, fix string) error {
		b.warnOnce("layout:"+target+"/"+e.IndexUUID, "refusing events with custom routing into the target index: it cannot be checked to place documents as the source does",
			logkey.Index, e.Index, logkey.IndexUUID, e.IndexUUID, logkey.Target, target, logkey.SourceLayout, source, logkey.TargetLayout, tl, logkey.Reason, fix)
		return redisx.Permanent(&BulkLayoutError{Index: e.Index, IndexUUID: e.IndexUUID, Target: target, Source: source, TargetLayout: tl, Fix: fix, Err: cause})
	}
	tl := "unknown: " + why
	if dst != nil {
		tl = describeLayout(dst)
	}
	if srcLayout == nil {
		if src.found && src.info.Shards == 1 && dst != nil && dst.Shards == 1 {
			return nil // two one-shard indices hold the same documents
		}
		source := fmt.Sprintf("%d shard(s), layout not recorded", src.info.Shards)
		if !src.found {
			source = "no record in the feed"
		}
		return refuse(ErrNoLayout, source, tl, "upgrade the relay and restart it: it records the layout of every index it follows when it adopts it; then send the refused events again (consume --bootstrap copies the source)")
	}
	if dst == nil {
		return refuse(ErrLayoutMismatch, describeLayout(srcLayout), tl, layoutFix(srcLayout, nil, target))
	}
	if !samePlacement(srcLayout, dst) {
		return refuse(ErrLayoutMismatch, describeLayout(srcLayout), tl, layoutFix(srcLayout, dst, target))
	}
	return nil
}

// warnOnce logs a warning the first time key is seen.
func (b *Bulk) warnOnce(key, msg string, args ...any) {
	b.mu.Lock()
	seen := b.warned[key]
	b.warned[key] = true
	b.mu.Unlock()
	if !seen {
		b.log.Warn(msg, args...)
	}
}
