package status

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/es-changefeed/es-changefeed/redisx"
)

// Absent is the report of a feed the Redis holds nothing of (no relay has
// written to it: redisx.FindFeed). It is unhealthy, and lists the feeds
// the Redis does hold, for a misspelt feed name or a wrong database.
type Absent struct {
	Feed string    `json:"feed"`
	At   time.Time `json:"at"`
	// Exists and Healthy are false.
	Exists  bool `json:"exists"`
	Healthy bool `json:"healthy"`
	// Problems say that the feed does not exist, and what to check.
	Problems []string `json:"problems"`
	// Feeds are the feeds the Redis holds (redisx.ListFeeds), sorted.
	// FeedsComplete is false when the listing stopped at its bound, or
	// failed: then FeedsError says why (a user without +scan).
	Feeds         []string `json:"feeds"`
	FeedsComplete bool     `json:"feeds_complete"`
	FeedsError    string   `json:"feeds_error,omitempty"`
}

// GatherAbsent reports a feed that does not exist: problem says so (the
// caller's words, naming what to check), and the feeds rdb holds are
// listed with redisx.ListFeeds (a bounded SCAN); a listing that fails is
// reported in FeedsError, not returned.
func GatherAbsent(ctx context.Context, rdb redis.UniversalClient, feed, problem string) Absent {
	r := Absent{Feed: feed, At: time.Now().UTC(), Problems: []string{problem}, Feeds: []string{}}
	feeds, complete, err := redisx.ListFeeds(ctx, rdb, 0)
	if err != nil {
		r.FeedsError = err.Error()
		return r
	}
	if feeds != nil {
		r.Feeds = feeds
	}
	r.FeedsComplete = complete
	return r
}

// WriteText prints the report.
func (r Absent) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "feed %s: DOES NOT EXIST (at %s)\n", r.Feed, r.At.Format(time.RFC3339))
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  ! %s\n", p)
	}
	switch {
	case r.FeedsError != "":
		fmt.Fprintf(&b, "feeds in this Redis: cannot list them: %s\n", r.FeedsError)
	case len(r.Feeds) == 0 && r.FeedsComplete:
		b.WriteString("feeds in this Redis: none (no escf:{<feed>}:meta key)\n")
	case len(r.Feeds) == 0:
		b.WriteString("feeds in this Redis: none among the keys looked at (the listing stopped before the end)\n")
	case r.FeedsComplete:
		fmt.Fprintf(&b, "feeds in this Redis: %s\n", strings.Join(r.Feeds, ", "))
	default:
		fmt.Fprintf(&b, "feeds in this Redis: %s, and maybe more (the listing stopped before the end)\n", strings.Join(r.Feeds, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
