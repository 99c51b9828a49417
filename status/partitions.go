package status

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// PartitionedReport is the state of a feed split in partitions: one Report
// per partition and totals. The feed is healthy when every partition is,
// and every consumer group reads every partition.
type PartitionedReport struct {
	Feed       string    `json:"feed"`
	At         time.Time `json:"at"`
	Partitions int       `json:"partitions"`
	Healthy    bool      `json:"healthy"`
	// Problems are the partitions' problems, each prefixed with
	// "partition <p>: ", and the feed's own.
	Problems []string `json:"problems"`
	// Relays are the live relay processes (redisx.Keys.Relays), when they
	// register there.
	Relays []string `json:"relays"`
	Totals Totals   `json:"totals"`
	// Partition holds each partition's report, in partition order.
	Partition []PartitionReport `json:"partition_reports"`
}

// PartitionReport is one partition's Report.
type PartitionReport struct {
	Partition int `json:"partition"`
	Report
}

// Totals add the partitions up.
type Totals struct {
	StreamLength int64 `json:"stream_length"`
	EntriesAdded int64 `json:"entries_added"`
	DeadLetters  int64 `json:"dead_letters"`
	// LeasesHeld counts partitions whose lease a relay holds; Holders are
	// the distinct lease owners.
	LeasesHeld int      `json:"leases_held"`
	Holders    []string `json:"lease_holders"`
	// Backpressure counts partitions whose relay pauses reading.
	Backpressure int          `json:"partitions_in_backpressure"`
	Shards       int          `json:"shards"`
	Groups       []GroupTotal `json:"groups"`
}

// GroupTotal is a consumer group over every partition.
type GroupTotal struct {
	Name    string `json:"name"`
	Lag     int64  `json:"lag"`
	Pending int64  `json:"pending"`
	// Partitions counts the partitions the group reads.
	Partitions int `json:"partitions"`
}

// GatherPartitions gathers the report of each of src.Keys's feed's
// partitions partitions (Gather with redisx.PartitionKeys), and totals
// them. src.Keys are the feed-level keys (redisx.NewKeys).
func GatherPartitions(ctx context.Context, src Sources, partitions int) (PartitionedReport, error) {
	feed := src.Keys.Feed()
	r := PartitionedReport{Feed: feed, At: time.Now().UTC(), Partitions: partitions, Problems: []string{}, Relays: []string{},
		Totals: Totals{Holders: []string{}, Groups: []GroupTotal{}}}
	groups := map[string]*GroupTotal{}
	for p := range partitions {
		ps := src
		ps.Keys, ps.Partition, ps.Partitions = redisx.PartitionKeys(feed, p, partitions), p, partitions
		rep, err := Gather(ctx, ps)
		if err != nil {
			return r, fmt.Errorf("partition %d: %w", p, err)
		}
		for _, pr := range rep.Problems {
			r.Problems = append(r.Problems, fmt.Sprintf("partition %d: %s", p, pr))
		}
		t := &r.Totals
		t.StreamLength += rep.Stream.Length
		t.EntriesAdded += rep.Stream.EntriesAdded
		t.DeadLetters += rep.DeadLetters
		if rep.Lease.Held {
			t.LeasesHeld++
			if !slices.Contains(t.Holders, rep.Lease.Owner) {
				t.Holders = append(t.Holders, rep.Lease.Owner)
			}
		}
		if rep.Backpressure != "" {
			t.Backpressure++
		}
		for _, ix := range rep.Indices {
			t.Shards += len(ix.Shards)
		}
		for _, g := range rep.Groups {
			gt := groups[g.Name]
			if gt == nil {
				gt = &GroupTotal{Name: g.Name}
				groups[g.Name] = gt
			}
			gt.Lag += g.Lag
			gt.Pending += g.Pending
			gt.Partitions++
		}
		r.Partition = append(r.Partition, PartitionReport{Partition: p, Report: rep})
	}
	for _, gt := range groups {
		r.Totals.Groups = append(r.Totals.Groups, *gt)
		if gt.Partitions < partitions {
			var missing []string
			for _, pr := range r.Partition {
				if !slices.ContainsFunc(pr.Groups, func(g Group) bool { return g.Name == gt.Name }) {
					missing = append(missing, strconv.Itoa(pr.Partition))
				}
			}
			r.Problems = append(r.Problems, fmt.Sprintf("group %s reads %d of the %d partitions (not %s): does a consumer of it run with another --partitions?",
				gt.Name, gt.Partitions, partitions, strings.Join(missing, ", ")))
		}
	}
	sort.Slice(r.Totals.Groups, func(i, j int) bool { return r.Totals.Groups[i].Name < r.Totals.Groups[j].Name })
	sort.Strings(r.Totals.Holders)
	// Live relays, when they register (a missing key is an empty list).
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	relays, err := src.Redis.ZRangeByScore(ctx, src.Keys.Relays(), &redis.ZRangeBy{Min: now, Max: "+inf"}).Result()
	if err == nil {
		r.Relays = append(r.Relays, relays...)
	}
	r.Healthy = len(r.Problems) == 0
	return r, nil
}

// WriteText prints the partitioned report as tables: partitions, groups
// per partition, shards.
func (r PartitionedReport) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	health := "healthy"
	if !r.Healthy {
		health = "UNHEALTHY"
	}
	fmt.Fprintf(tw, "feed %s: %s, %d partitions (at %s)\n", r.Feed, health, r.Partitions, r.At.Format(time.RFC3339))
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "  ! %s\n", p)
	}
	if len(r.Relays) > 0 {
		fmt.Fprintf(tw, "relays: %d live (%s)\n", len(r.Relays), strings.Join(r.Relays, ", "))
	}
	if c := r.cluster(); c != "" {
		fmt.Fprintf(tw, "cluster: %s\n", c)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "PARTITION\tLEASE HOLDER\tLEASE TTL\tBACKPRESSURE\tSHARDS\tSTREAM\tADDED EVER\tLAST ENTRY AGE\tDEAD LETTERS")
	for _, p := range r.Partition {
		holder, ttl := "(free)", "-"
		if p.Lease.Held {
			holder, ttl = p.Lease.Owner, age(p.Lease.TTL.Duration())
		}
		bp := "-"
		if p.Backpressure != "" {
			bp = "since " + p.Backpressure
		}
		shards := 0
		for _, ix := range p.Indices {
			shards += len(ix.Shards)
		}
		last := "-"
		if p.Stream.Length > 0 {
			last = age(p.Stream.LastAge.Duration())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\n", p.Partition, holder, ttl, bp, shards, p.Stream.Length, p.Stream.EntriesAdded, last, p.DeadLetters)
	}
	t := r.Totals
	fmt.Fprintf(tw, "total\t%d of %d held (%d relays)\t\t%d\t%d\t%d\t%d\t\t%d\n", t.LeasesHeld, r.Partitions, len(t.Holders),
		t.Backpressure, t.Shards, t.StreamLength, t.EntriesAdded, t.DeadLetters)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GROUP\tPARTITION\tLAG\tPENDING\tOLDEST PENDING IDLE\tLAST DELIVERED\tCONSUMERS")
	for _, gt := range t.Groups {
		for _, p := range r.Partition {
			for _, g := range p.Groups {
				if g.Name != gt.Name {
					continue
				}
				var cs []string
				for _, c := range g.Consumers {
					cs = append(cs, fmt.Sprintf("%s (%d pending, idle %s)", c.Name, c.Pending, age(c.Idle.Duration())))
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\n", g.Name, p.Partition, g.Lag, g.Pending, age(g.OldestPendingIdle.Duration()), g.LastDelivered, strings.Join(cs, ", "))
			}
		}
		fmt.Fprintf(tw, "%s\ttotal (%d of %d)\t%d\t%d\t\t\t\n", gt.Name, gt.Partitions, r.Partitions, gt.Lag, gt.Pending)
	}
	if len(t.Groups) == 0 {
		fmt.Fprintln(tw, "(no consumer group)")
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "INDEX\tSHARD\tPARTITION\tCHECKPOINT\tGLOBAL CHECKPOINT\tLAG\tLAST COMMIT\tUNDELIVERED SINCE SCAN")
	type row struct {
		ix Index
		sh Shard
		p  int
	}
	var rows []row
	for _, p := range r.Partition {
		for _, ix := range p.Indices {
			for _, sh := range ix.Shards {
				rows = append(rows, row{ix, sh, p.Partition})
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.ix.Name != b.ix.Name {
			return a.ix.Name < b.ix.Name
		}
		if a.ix.UUID != b.ix.UUID {
			return a.ix.UUID < b.ix.UUID
		}
		return a.sh.Shard < b.sh.Shard
	})
	for _, rw := range rows {
		name := rw.ix.Name
		if rw.ix.Missing {
			name += " (missing in the cluster)"
		}
		gcp, lag := "-", "-"
		if rw.sh.GlobalCheckpoint != nil {
			gcp, lag = fmt.Sprint(*rw.sh.GlobalCheckpoint), fmt.Sprint(*rw.sh.Lag)
		}
		last := "never"
		if !rw.sh.LastCommit.IsZero() {
			last = age(time.Since(rw.sh.LastCommit)) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%d\n", name, rw.sh.Shard, rw.p, rw.sh.Checkpoint, gcp, lag, last, rw.sh.Gap)
	}
	return tw.Flush()
}

// cluster is the first partition's cluster line (they ask the same
// cluster).
func (r PartitionedReport) cluster() string {
	for _, p := range r.Partition {
		if p.Cluster != "" {
			return p.Cluster
		}
	}
	return ""
}
