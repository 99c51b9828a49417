package deletes

import "github.com/prometheus/client_golang/prometheus"

// scanCollector exposes a Scanner's counters to Prometheus.
type scanCollector struct {
	s     *Scanner
	scans *prometheus.Desc
	dels  *prometheus.Desc
}

func newScanCollector(s *Scanner) *scanCollector {
	return &scanCollector{s: s,
		scans: prometheus.NewDesc("escf_delete_scans_total",
			"Delete scans by outcome: due, saved_by_gap_proof, saved_by_count_proof, listed, confirmed, aborted.", []string{"result"}, nil),
		dels: prometheus.NewDesc("escf_deletes_found_total", "Delete events committed by scans.", nil, nil),
	}
}

func (c *scanCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.scans
	ch <- c.dels
}

func (c *scanCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for result, n := range map[string]int64{"due": st.Due, "saved_by_gap_proof": st.SavedByGap,
		"saved_by_count_proof": st.SavedByCount, "listed": st.Listings, "confirmed": st.Confirmations, "aborted": st.Aborted} {
		ch <- prometheus.MustNewConstMetric(c.scans, prometheus.CounterValue, float64(n), result)
	}
	ch <- prometheus.MustNewConstMetric(c.dels, prometheus.CounterValue, float64(st.Deletes))
}
