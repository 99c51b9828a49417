package relay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/es-changefeed/es-changefeed/checkpoint"
	"github.com/es-changefeed/es-changefeed/es"
	"github.com/es-changefeed/es-changefeed/internal/logkey"
	"github.com/es-changefeed/es-changefeed/redisx"
)

// progressMin is the size from which an initial read logs progress.
const progressMin = 10_000

// progress tracks a long read: an index's first read from its beginning, or
// a resync's snapshot.
type progress struct {
	what    string
	total   int64 // documents when it began (from _count)
	done    int64
	start   time.Time
	lastLog time.Time
	report  func(done, total int64)
}

func newProgress(what string, total int64, report func(done, total int64)) *progress {
	now := time.Now()
	return &progress{what: what, total: total, start: now, lastLog: now, report: report}
}

// add counts n documents and logs every ProgressInterval: done / total, rate,
// and the time left at that rate.
func (p *progress) add(r *Relay, n int) {
	if p == nil {
		return
	}
	p.done += int64(n)
	if p.report != nil {
		p.report(p.done, p.total)
	}
	if time.Since(p.lastLog) < r.cfg.ProgressInterval {
		return
	}
	p.lastLog = time.Now()
	elapsed := time.Since(p.start).Seconds()
	rate := float64(p.done) / elapsed
	args := []any{logkey.Documents, p.done, logkey.Total, p.total, logkey.PerSecond, int64(rate)}
	if p.total > 0 {
		args = append(args, logkey.Percent, fmt.Sprintf("%.1f", 100*float64(p.done)/float64(p.total)))
		if left := p.total - p.done; left > 0 && rate > 0 {
			args = append(args, logkey.ETA, (time.Duration(float64(left)/rate) * time.Second).Round(time.Second).String())
		}
	}
	r.log.Info(p.what, args...)
}

// finish logs the end of the read.
func (p *progress) finish(r *Relay) {
	if p == nil {
		return
	}
	elapsed := time.Since(p.start)
	r.log.Info(p.what+": done", logkey.Documents, p.done, logkey.Took, elapsed.Round(time.Millisecond).String(),
		logkey.PerSecond, int64(float64(p.done)/max(elapsed.Seconds(), 1e-9)))
}

// snapshot writes a resync: it resets the feed's state, emits
// snapshot_start, every live document of every index behind the targets (one
// frozen view per shard, so each document that exists is in it once), and
// snapshot_end with the count per index. Each shard's checkpoint is the
// global checkpoint read before its view was opened, so everything after is
// read again by the usual rounds (an upsert a consumer may already hold is
// harmless: same seq no). A consumer may drop whatever it holds that the
// snapshot did not contain.
func (r *Relay) snapshot(ctx context.Context) error {
	store := r.cfg.Store
	dropped, err := store.Reset(ctx)
	if err != nil {
		return err
	}
	want, closed, err := r.resolveTargets(ctx, &targetState{said: map[string]string{}})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	var total int64
	for _, n := range names {
		if err := r.cfg.ES.Refresh(ctx, n); err != nil {
			return err
		}
		c, err := r.cfg.ES.CountIndex(ctx, n)
		if err != nil {
			return err
		}
		total += c
	}
	targets := strings.Join(r.cfg.Targets, ",")
	now := time.Now().UTC().Format(time.RFC3339Nano)
	start := checkpoint.Batch{
		Events: []redisx.Event{{Op: redisx.OpSnapshotStart, Target: targets}},
		Meta:   map[string]string{checkpoint.MetaCreated: now, checkpoint.MetaSnapshot: now},
	}
	if err := r.commit(ctx, start); err != nil {
		return err
	}
	r.mu.Lock()
	r.sawMeta = true
	r.mu.Unlock()
	r.log.Info("resync: snapshot started", logkey.Indices, len(names), logkey.Documents, total, logkey.ClosedSkipped, len(closed), logkey.StateKeysDropped, dropped)
	prog := newProgress("resync snapshot", total, r.cfg.SnapshotProgress)
	counts := map[string]int64{}
	for _, name := range names {
		n, err := r.snapshotIndex(ctx, name, want[name], prog)
		if err != nil {
			return fmt.Errorf("snapshot of %s: %w", name, err)
		}
		counts[name] = n
	}
	end := checkpoint.Batch{
		Events: []redisx.Event{{Op: redisx.OpSnapshotEnd, Target: targets, Counts: counts}},
		Meta:   map[string]string{checkpoint.MetaSnapshot: ""},
	}
	if err := r.commit(ctx, end); err != nil {
		return err
	}
	prog.finish(r)
	return nil
}

// snapshotIndex writes every live document of one index and its shards'
// checkpoints.
func (r *Relay) snapshotIndex(ctx context.Context, name, target string, prog *progress) (int64, error) {
	settings, err := r.cfg.ES.Settings(ctx, name)
	if err != nil {
		return 0, err
	}
	if settings.SequenceNumbersDisabled {
		return 0, fmt.Errorf("%w: index %s has sequence numbers disabled (index.disable_sequence_numbers: true)", ErrUnfollowable, name)
	}
	stats, err := r.cfg.ES.Stats(ctx, []string{name})
	if err != nil {
		return 0, err
	}
	st := stats[name]
	if len(st.Shards) != settings.Shards {
		return 0, fmt.Errorf("only %d of %d primaries of %s are started", len(st.Shards), settings.Shards, name)
	}
	if err := r.cfg.ES.Refresh(ctx, name); err != nil {
		return 0, err
	}
	layout, err := r.indexLayout(ctx, r.cfg.ES, name)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	info := checkpoint.IndexInfo{Name: name, Target: target, Shards: settings.Shards, FirstSeen: time.Now().UTC(), ClusterUUID: r.clusterUUID, Layout: layout}
	r.mu.Unlock()
	rec := checkpoint.Batch{Indices: map[string]checkpoint.IndexInfo{st.UUID: info}}
	if err := r.assignGeneration(ctx, st.UUID, name, &rec); err != nil {
		return 0, err
	}
	if err := r.commit(ctx, rec); err != nil {
		return 0, err
	}
	var count int64
	for _, sc := range st.Shards {
		if !r.owns(st.UUID, sc.Shard) {
			continue // another partition's
		}
		n, err := r.snapshotShard(ctx, name, target, st.UUID, sc, prog)
		count += n
		if err != nil {
			return count, err
		}
	}
	return count, nil
}

// snapshotAttempts bounds how often a shard's snapshot starts again because
// its primary changed before anything of it was written.
const snapshotAttempts = 5

// snapshotShard writes every live document of one shard from one frozen
// view, then the shard's checkpoint. sc is the primary read before the
// refresh that preceded the view.
//
// The view may show versions written above the gcp, which a failover can
// still discard (and an op above the gcp can hide the document's older
// version at or below it). So before the first page is written the view is
// settled: the gcp must reach the max seq no read after the view opened, on
// the same primary. If the primary changed meanwhile, nothing of the shard
// was written and its snapshot starts again from a new view.
func (r *Relay) snapshotShard(ctx context.Context, name, target, uuid string, sc es.ShardCheckpoints, prog *progress) (int64, error) {
	id := checkpoint.ShardID{IndexUUID: uuid, Shard: sc.Shard}
	for attempt := 1; ; attempt++ {
		settled := false
		n, err := r.cfg.ES.SnapshotShard(ctx, name, sc.Shard, sc.Node, r.cfg.BatchSize, es.ListingAuto, func(hits []es.Hit) error {
			if !settled {
				if err := r.settle(ctx, r.cfg.ES, name, sc.Shard, sc); err != nil {
					return err
				}
				settled = true
			}
			b := checkpoint.Batch{Events: make([]redisx.Event, len(hits)), Delivered: map[checkpoint.ShardID][]checkpoint.Doc{}}
			docs := make([]checkpoint.Doc, len(hits))
			for i, h := range hits {
				b.Events[i] = upsertEvent(name, uuid, sc.Shard, target, h)
				docs[i] = checkpoint.Doc{ID: h.ID, Routing: h.Routing, SeqNo: h.SeqNo}
			}
			b.Delivered[id] = docs
			if err := r.commit(ctx, b); err != nil {
				return err
			}
			prog.add(r, len(hits))
			return nil
		})
		if err == nil && !settled {
			// An empty view may hide documents too (a delete above the gcp).
			if err = r.settle(ctx, r.cfg.ES, name, sc.Shard, sc); err == nil {
				settled = true
			}
		}
		if errors.Is(err, errPrimaryChanged) && !settled && attempt < snapshotAttempts {
			r.log.Warn("resync: the shard's primary changed before its snapshot was written; starting it again", logkey.Index, name, logkey.Shard, sc.Shard, logkey.Error, err)
			if sc, err = r.refreshedPrimary(ctx, name, sc.Shard); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			return n, err
		}
		// The view may hold ops above the gcp read before it: they are read
		// again by the rounds that follow, never missed.
		if sc.GlobalCheckpoint >= 0 {
			b := checkpoint.Batch{Checkpoints: map[checkpoint.ShardID]int64{id: sc.GlobalCheckpoint}}
			if sc.HistoryUUID != "" {
				b.Histories = map[checkpoint.ShardID]string{id: sc.HistoryUUID}
			}
			if err := r.commit(ctx, b); err != nil {
				return n, err
			}
		}
		return n, nil
	}
}

// refreshedPrimary reads shard's primary, then refreshes the index, so a
// view opened next holds every op at or below the gcp returned.
func (r *Relay) refreshedPrimary(ctx context.Context, name string, shard int) (es.ShardCheckpoints, error) {
	stats, err := r.cfg.ES.Stats(ctx, []string{name})
	if err != nil {
		return es.ShardCheckpoints{}, err
	}
	sc, ok := stats[name].Shard(shard)
	if !ok {
		return sc, fmt.Errorf("shard %d of %s: the primary is not started", shard, name)
	}
	return sc, r.cfg.ES.Refresh(ctx, name)
}
