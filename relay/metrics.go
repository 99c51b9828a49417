package relay

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/es-changefeed/es-changefeed/es"
)

// metrics are the relay's Prometheus collectors (commits and events are
// counted by checkpoint.Store, which every commit goes through), registered on the
// Registerer of its Config (none: they count but nobody scrapes them).
//
// The per-shard series are labelled by the concrete index name and the
// shard number (with a partition label from a Feed's Registerer), never by
// the index uuid: a re-created index (same name, new uuid) continues the
// series of its name, whose checkpoint starts again from -1, and a
// dashboard keeps its query. Its old series are deleted when the new uuid
// is adopted, so shards the new index does not have do not linger. A
// rollover's new index is a new name, so new series; the old index's stay
// while it is followed. A series lives while this relay follows its index:
// when the index's loop ends (the index was deleted, no longer matches the
// targets, is refused, or this relay stopped leading) forgetIndex deletes
// them, so /metrics does not report indices that are gone, nor those
// another process (or partition holder) now reports.
type metrics struct {
	checkpoint   *prometheus.GaugeVec
	gcp          *prometheus.GaugeVec
	rounds       prometheus.Counter
	ticks        prometheus.Counter
	resolutions  prometheus.Counter
	errors       *prometheus.CounterVec
	backpressure prometheus.Gauge
	leaseHeld    prometheus.Gauge
	trimmed      prometheus.Counter
}

// newMetrics makes the collectors and registers them on reg (when not
// nil); a registration error (the same collector twice on reg) is
// returned.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		checkpoint: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "escf_shard_checkpoint",
			Help: "Highest seq no read (delivered or skipped) per shard."}, []string{"index", "shard"}),
		gcp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "escf_shard_global_checkpoint",
			Help: "The primary's global checkpoint per shard, as last read."}, []string{"index", "shard"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Name: "escf_rounds_total",
			Help: "Relay rounds run (over all indices)."}),
		ticks: prometheus.NewCounter(prometheus.CounterOpts{Name: "escf_poll_ticks_total",
			Help: "Poll ticks on which index rounds began (once per tick, whatever the number of indices). Fewer than one per poll interval: rounds take longer than the poll interval."}),
		resolutions: prometheus.NewCounter(prometheus.CounterOpts{Name: "escf_target_resolutions_total",
			Help: "Resolutions of the target expressions (--index), one per poll interval."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "escf_errors_total",
			Help: "Failed rounds, by component (es, redis) and kind (HTTP status, connection, ...)."}, []string{"component", "kind"}),
		backpressure: prometheus.NewGauge(prometheus.GaugeOpts{Name: "escf_backpressure",
			Help: "1 while the relay pauses reading because a group's lag exceeds --max-backlog."}),
		leaseHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: "escf_lease_held",
			Help: "1 while this relay holds the feed's lease (leads), 0 as a standby."}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "escf_stream_trimmed_entries_total",
			Help: "Stream entries removed by safe trimming."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.checkpoint, m.gcp, m.rounds, m.ticks, m.resolutions,
			m.errors, m.backpressure, m.leaseHeld, m.trimmed} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register the relay's metrics: %w", err)
			}
		}
	}
	return m, nil
}

// forgetIndex deletes the per-shard series of an index.
func (m *metrics) forgetIndex(name string) {
	m.checkpoint.DeletePartialMatch(prometheus.Labels{"index": name})
	m.gcp.DeletePartialMatch(prometheus.Labels{"index": name})
}

// countError counts a failed round by what failed.
func (m *metrics) countError(err error) {
	var ee *es.Error
	switch {
	case errors.As(err, &ee) && ee.Status == 0:
		m.errors.WithLabelValues("es", "connection").Inc()
	case errors.As(err, &ee) && errors.Is(ee, es.ErrPartial):
		m.errors.WithLabelValues("es", "partial").Inc()
	case errors.As(err, &ee):
		m.errors.WithLabelValues("es", strconv.Itoa(ee.Status)).Inc()
	default:
		m.errors.WithLabelValues("redis", "error").Inc()
	}
}
