package main

import (
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/redisx"
)

func TestExplainNoFeed(t *testing.T) {
	nf := &redisx.FeedNotFoundError{Feed: "ordres", Partitions: 1}
	tests := []struct {
		name      string
		waited    time.Duration
		bootstrap bool
		want      []string
		not       []string
	}{
		{name: "consume", want: []string{`feed "ordres" does not exist`, "--feed ordres", "redis://r:6379/0", "es-changefeed run --feed ordres",
			"pass --wait-for-feed <duration>", "es-changefeed status --feed ordres` lists"}, not: []string{"--bootstrap"}},
		{name: "consume after a wait", waited: 30 * time.Second, want: []string{"waited 30s for it (--wait-for-feed)"}, not: []string{"pass --wait-for-feed"}},
		{name: "bootstrap", bootstrap: true, want: []string{"--bootstrap copies the indices the feed's relay follows: start the relay first"}},
		{name: "status", waited: -1, want: []string{"--feed ordres", "es-changefeed run --feed ordres"}, not: []string{"--wait-for-feed", "lists the feeds"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := explainNoFeed(nf, "redis://r:6379/0", tt.waited, tt.bootstrap)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q\nlacks %q", got, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("%q\nsays %q", got, n)
				}
			}
		})
	}
}
