package consumer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exposes a Pool's counters and handler latency.
type poolCollector struct {
	p       *Pool
	events  *prometheus.Desc
	latency prometheus.Histogram
}

func newPoolCollector(p *Pool) *poolCollector {
	return &poolCollector{p: p,
		events: prometheus.NewDesc("escf_consumer_events_total",
			"Consumer pool events by outcome: read, handled, failed (attempts), acked, dead_lettered, reclaimed, gone.",
			[]string{"result"}, prometheus.Labels{"group": p.cfg.Group}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "escf_handler_duration_seconds",
			Help: "Time of one handler call (one event applied to the sink).", ConstLabels: prometheus.Labels{"group": p.cfg.Group},
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	c.latency.Describe(ch)
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.p.Stats()
	for result, n := range map[string]int64{"read": st.Read, "handled": st.Handled, "failed": st.Failed, "acked": st.Acked,
		"dead_lettered": st.DeadLettered, "reclaimed": st.Reclaimed, "gone": st.Gone} {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(n), result)
	}
	c.latency.Collect(ch)
}
