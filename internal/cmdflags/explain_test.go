package cmdflags

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/relay"
)

func TestExplain(t *testing.T) {
	notFound := errors.New("no such index [absent]")
	lost := &redisx.HistoryLostError{Feed: "lost", Stream: "escf:{lost}:events",
		Group: redisx.GroupState{Name: "g1", LostUnread: 20, LastDelivered: "1-0"}}
	tests := []struct {
		name string
		err  error
		want []string // in the explained message
		is   error    // still errors.Is after explain
	}{
		{name: "missing target, wrapped",
			err:  fmt.Errorf("partition 0: %w", &relay.TargetError{Kind: relay.ErrTargetMissing, Expr: "absent", URLs: "[http://es:9200]", Err: notFound}),
			want: []string{`partition 0: --index "absent" names no index, alias or data stream on [http://es:9200] (no such index [absent]): check for a typo`},
			is:   relay.ErrTargetMissing},
		{name: "closed target",
			err:  &relay.TargetError{Kind: relay.ErrTargetClosed, Expr: "logs", Index: "logs"},
			want: []string{`index logs (--index "logs") is closed`, "POST /logs/_open"},
			is:   relay.ErrTargetClosed},
		{name: "seq no disabled, named",
			err:  &relay.TargetError{Kind: relay.ErrSeqNoDisabled, Expr: "ts-1", Index: "ts-1"},
			want: []string{`index ts-1 (matched by --index "ts-1") has sequence numbers disabled`, "; remove it from --index"},
			is:   relay.ErrSeqNoDisabled},
		{name: "seq no disabled, by pattern",
			err:  &relay.TargetError{Kind: relay.ErrSeqNoDisabled, Expr: "ts-*", Index: "ts-1"},
			want: []string{`(matched by --index "ts-*")`, `exclude it (e.g. "ts-*,-ts-1")`}},
		{name: "partitions",
			err:  fmt.Errorf("consume: %w", &redisx.PartitionsError{Feed: "parts", Recorded: 3, Passed: 4}),
			want: []string{"consume: feed parts has 3 partitions (escf:{parts}:meta partitions); you passed --partitions 4: pass --partitions 3, or start a new feed"}},
		{name: "partitions of an unpartitioned feed",
			err:  &redisx.PartitionsError{Feed: "one", Recorded: 1, Passed: 3},
			want: []string{"you passed --partitions 3: pass --partitions 1 (or leave it out)"}},
		{name: "history lost",
			err:  lost,
			want: []string{`history lost: consumer group "g1"`, "20 entries", "`es-changefeed consume --feed lost --group g1 --bootstrap --es <cluster URL>`"},
			is:   redisx.ErrHistoryLost},
		{name: "new group on a trimmed stream",
			err:  &redisx.HistoryLostError{Feed: "default", Stream: "escf:{default}:events", Group: redisx.GroupState{Name: "g"}, New: true},
			want: []string{"no longer holds the feed from its start", "Join with --bootstrap", "--start '$'"}},
		{name: "other errors stay", err: errors.New("boom"), want: []string{"boom"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Explain(tt.err)
			for _, want := range tt.want {
				if !strings.Contains(got.Error(), want) {
					t.Errorf("explain = %q\nwant it to contain %q", got, want)
				}
			}
			if tt.is != nil && !errors.Is(got, tt.is) {
				t.Errorf("Explain(%v) is no longer %v", tt.err, tt.is)
			}
			if strings.Contains(tt.err.Error(), "--") {
				t.Errorf("the library's message %q names a flag", tt.err)
			}
		})
	}
}

func TestExplainLost(t *testing.T) {
	err := fmt.Errorf("3 pending entries are gone from the stream (%w; the oldest 1-0): re-initialize the group with a bootstrap", redisx.ErrHistoryLost)
	got := ExplainLost(err, "orders", "g").Error()
	if want := "(history lost; the oldest 1-0): re-initialize the group with es-changefeed consume --feed orders --group g --bootstrap"; !strings.HasSuffix(got, want) {
		t.Errorf("ExplainLost = %q, want it to end in %q", got, want)
	}
	if n := strings.Count(got, "re-initialize"); n != 1 {
		t.Errorf("ExplainLost = %q: the advice %d times, want once", got, n)
	}
	if !errors.Is(ExplainLost(err, "orders", "g"), redisx.ErrHistoryLost) {
		t.Error("ExplainLost lost the error's chain")
	}
	other := fmt.Errorf("%w: the group's loss recorded earlier", redisx.ErrHistoryLost)
	if got, want := ExplainLost(other, "", "g").Error(), "; re-initialize the group with es-changefeed consume --group g --bootstrap"; !strings.HasSuffix(got, want) {
		t.Errorf("ExplainLost = %q, want it to end in %q", got, want)
	}
	if got, want := ExplainLost(errors.New("boom"), "orders", "g").Error(), "boom"; got != want {
		t.Errorf("ExplainLost(other) = %q, want %q", got, want)
	}
}
