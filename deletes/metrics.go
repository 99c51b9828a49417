package deletes

import "github.com/prometheus/client_golang/prometheus"

// scanCollector exposes a Scanner's counters to Prometheus.
type scanCollector struct {
	s                                 *Scanner
	scans, dels, listed, ranges, seqs *prometheus.Desc
	stale, requests, clusterTime      *prometheus.Desc
}

func newScanCollector(s *Scanner) *scanCollector {
	return &scanCollector{s: s,
		scans: prometheus.NewDesc("escf_delete_scans_total",
			"Delete scans by outcome: due, saved_by_gap_proof, saved_by_count_proof, localized (read only the seq-no ranges that differ), listed (listed every live id: a shard's first scan after the upgrade to delivered ranges), migrated, confirmed, aborted.",
			[]string{"result"}, nil),
		dels:   prometheus.NewDesc("escf_deletes_found_total", "Delete events committed by scans.", nil, nil),
		listed: prometheus.NewDesc("escf_delete_listed_ids_total", "Ids listed by delete scans (only the scans that move a shard to delivered ranges list ids).", nil, nil),
		ranges: prometheus.NewDesc("escf_delete_ranges_total",
			"Delivered seq-no ranges a scan compared with the cluster's counts (result=compared), and those that differed and were read (result=differed).", []string{"result"}, nil),
		seqs:     prometheus.NewDesc("escf_delete_seqnos_read_total", "Live seq nos read by delete scans in the ranges that differed.", nil, nil),
		stale:    prometheus.NewDesc("escf_delete_stale_entries_total", "Delivered entries removed because their document moved to a later seq no.", nil, nil),
		requests: prometheus.NewDesc("escf_delete_scan_requests_total", "Requests delete scans made to the cluster.", nil, nil),
		clusterTime: prometheus.NewDesc("escf_delete_scan_cluster_seconds_total",
			"Time the requests of delete scans took, from sending each to the end of its answer (--delete-scan-budget paces scans by it).", nil, nil),
	}
}

func (c *scanCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.scans, c.dels, c.listed, c.ranges, c.seqs, c.stale, c.requests, c.clusterTime} {
		ch <- d
	}
}

func (c *scanCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	for result, n := range map[string]int64{"due": st.Due, "saved_by_gap_proof": st.SavedByGap,
		"saved_by_count_proof": st.SavedByCount, "localized": st.Localized, "listed": st.Listings, "migrated": st.Migrated,
		"confirmed": st.Confirmations, "aborted": st.Aborted} {
		ch <- prometheus.MustNewConstMetric(c.scans, prometheus.CounterValue, float64(n), result)
	}
	counter := func(d *prometheus.Desc, n int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), labels...)
	}
	counter(c.dels, st.Deletes)
	counter(c.listed, st.ListedIDs)
	counter(c.ranges, st.RangesCompared, "compared")
	counter(c.ranges, st.RangesDiffered, "differed")
	counter(c.seqs, st.SeqNosRead)
	counter(c.stale, st.StaleRemoved)
	counter(c.requests, st.Requests)
	ch <- prometheus.MustNewConstMetric(c.clusterTime, prometheus.CounterValue, st.ClusterTime.Seconds())
}
