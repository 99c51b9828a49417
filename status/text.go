package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// WriteText prints the report as tables.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	health := "healthy"
	if !r.Healthy {
		health = "UNHEALTHY"
	}
	fmt.Fprintf(tw, "feed %s: %s (at %s)\n", r.Feed, health, r.At.Format(time.RFC3339))
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "  ! %s\n", p)
	}
	if r.Lease.Held {
		since := "since unknown"
		if !r.Lease.Since.IsZero() {
			since = "for " + age(time.Since(r.Lease.Since))
		}
		fmt.Fprintf(tw, "lease: held by %s %s (expires in %s unless renewed)\n", r.Lease.Owner, since, age(r.Lease.TTL.Duration()))
	} else {
		fmt.Fprintln(tw, "lease: free (no relay leads)")
	}
	if r.Backpressure != "" {
		fmt.Fprintf(tw, "backpressure: ON since %s (the relay pauses reading)\n", r.Backpressure)
	}
	if r.Cluster != "" {
		fmt.Fprintf(tw, "cluster: %s\n", r.Cluster)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "INDEX\tSHARD\tCHECKPOINT\tGLOBAL CHECKPOINT\tLAG\tLAST COMMIT\tUNDELIVERED SINCE SCAN\tDELIVERED IDS")
	var ids, ranges, migrate, shards int64
	for _, ix := range r.Indices {
		name := ix.Name
		if ix.Missing {
			name += " (missing in the cluster)"
		}
		for _, sh := range ix.Shards {
			gcp, lag := "-", "-"
			if sh.GlobalCheckpoint != nil {
				gcp, lag = fmt.Sprint(*sh.GlobalCheckpoint), fmt.Sprint(*sh.Lag)
			}
			last := "never"
			if !sh.LastCommit.IsZero() {
				last = age(time.Since(sh.LastCommit)) + " ago"
			}
			dlv := fmt.Sprintf("%d in %d ranges", sh.DeliveredIDs, sh.DeliveredRanges)
			if sh.ToMigrate > 0 {
				dlv += fmt.Sprintf(" + %d to migrate", sh.ToMigrate)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\n", name, sh.Shard, sh.Checkpoint, gcp, lag, last, sh.Gap, dlv)
			ids, ranges, migrate, shards = ids+sh.DeliveredIDs, ranges+sh.DeliveredRanges, migrate+sh.ToMigrate, shards+1
		}
	}
	fmt.Fprintln(tw)
	line := fmt.Sprintf("delivered ids: %d in %d seq-no ranges of %d over %d shards (for delete scans)", ids, ranges, redisx.RangeSize, shards)
	if migrate > 0 {
		line += fmt.Sprintf("; %d ids of the layout before ranges, moved by the shards' next delete scans", migrate)
	}
	fmt.Fprintln(tw, line)
	s := r.Stream
	if s.Length > 0 {
		fmt.Fprintf(tw, "stream: %d entries (%d added ever), first %s (%s old), last %s (%s old)\n",
			s.Length, s.EntriesAdded, s.FirstID, age(s.FirstAge.Duration()), s.LastID, age(s.LastAge.Duration()))
	} else {
		fmt.Fprintf(tw, "stream: empty (%d added ever)\n", s.EntriesAdded)
	}
	fmt.Fprintf(tw, "dead letters: %d\n", r.DeadLetters)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GROUP\tLAG\tPENDING\tOLDEST PENDING IDLE\tHISTORY LOST\tLAST DELIVERED\tCONSUMERS")
	for _, g := range r.Groups {
		var cs []string
		for _, c := range g.Consumers {
			cs = append(cs, fmt.Sprintf("%s (%d pending, idle %s)", c.Name, c.Pending, age(c.Idle.Duration())))
		}
		lost := "-"
		switch {
		case g.HistoryLost < 0:
			lost = "yes"
		case g.HistoryLost > 0:
			lost = fmt.Sprint(g.HistoryLost)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", g.Name, g.Lag, g.Pending, age(g.OldestPendingIdle.Duration()), lost, g.LastDelivered, strings.Join(cs, ", "))
	}
	if len(r.Groups) == 0 {
		fmt.Fprintln(tw, "(no consumer group)")
	}
	return tw.Flush()
}

// age prints a duration briefly: 850ms, 12s, 3m4s, 2h5m, 3d4h.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
