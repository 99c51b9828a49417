package redisx

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// StreamCollector reports, at each scrape, the feed's stream length, each
// group's lag, pending entries and lost history (ReadGroups, and the
// losses consumers recorded), and the dead-letter stream's length.
// Register it once per process on the feed you serve metrics for.
type StreamCollector struct {
	rdb     redis.UniversalClient
	keys    Keys
	length  *prometheus.Desc
	lag     *prometheus.Desc
	pending *prometheus.Desc
	lost    *prometheus.Desc
	dead    *prometheus.Desc
	up      *prometheus.Desc
}

// NewStreamCollector returns a collector for the feed of keys.
func NewStreamCollector(rdb redis.UniversalClient, keys Keys) *StreamCollector {
	feed := prometheus.Labels{"feed": keys.Feed()}
	return &StreamCollector{rdb: rdb, keys: keys,
		length:  prometheus.NewDesc("escf_stream_entries", "Entries in the feed's stream.", nil, feed),
		lag:     prometheus.NewDesc("escf_group_lag_entries", "Entries not yet delivered to a consumer group.", []string{"group"}, feed),
		pending: prometheus.NewDesc("escf_group_pending_entries", "Entries delivered to a group and not acknowledged.", []string{"group"}, feed),
		lost: prometheus.NewDesc("escf_group_history_lost_entries",
			"Entries a group had not handled that are gone from the stream (trimmed or deleted); 1 when how many is unknown. Above 0: re-initialize the group with consume --bootstrap.",
			[]string{"group"}, feed),
		dead: prometheus.NewDesc("escf_dead_letter_entries", "Entries in the dead-letter stream.", nil, feed),
		up:   prometheus.NewDesc("escf_redis_up", "1 if the last scrape could read the feed's Redis.", nil, feed),
	}
}

// Describe implements prometheus.Collector.
func (c *StreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.length, c.lag, c.pending, c.lost, c.dead, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StreamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	up := 1.0
	n, err := c.rdb.XLen(ctx, c.keys.Events()).Result()
	if err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.length, prometheus.GaugeValue, float64(n))
	if _, groups, err := ReadGroups(ctx, c.rdb, c.keys.Events()); err == nil {
		recorded, err := ReadLosses(ctx, c.rdb, c.keys)
		if err != nil {
			up = 0
		}
		for _, g := range groups {
			lost := g.Lost()
			if lost < 0 || (lost == 0 && recorded[g.Name] != "") {
				lost = 1 // at least one: Redis cannot count it, or a consumer found it and the stream no longer shows it
			}
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(max(g.Lag, 0)), g.Name)
			ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(g.Pending), g.Name)
			ch <- prometheus.MustNewConstMetric(c.lost, prometheus.GaugeValue, float64(lost), g.Name)
		}
	} else {
		up = 0
	}
	dead, err := c.rdb.XLen(ctx, c.keys.Dead()).Result()
	if err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(dead))
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}
