package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/relay"
)

// TestParseRunFlags_Bounds: run's flags take the relay's bounds
// (relay.MaxBatchSize, relay.MaxReadConcurrency) and refuse one more, in
// the words users see; the usage says the same bounds.
func TestParseRunFlags_Bounds(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // "" accepted
	}{
		{name: "batch size at the bound", args: []string{"--batch-size", strconv.Itoa(relay.MaxBatchSize)}},
		{name: "batch size above", args: []string{"--batch-size", strconv.Itoa(relay.MaxBatchSize + 1)},
			want: fmt.Sprintf("--batch-size %d: want 1..%d", relay.MaxBatchSize+1, relay.MaxBatchSize)},
		{name: "batch size zero", args: []string{"--batch-size", "0"}, want: fmt.Sprintf("--batch-size 0: want 1..%d", relay.MaxBatchSize)},
		{name: "read concurrency at the bound", args: []string{"--read-concurrency", strconv.Itoa(relay.MaxReadConcurrency)}},
		{name: "read concurrency above", args: []string{"--read-concurrency", strconv.Itoa(relay.MaxReadConcurrency + 1)},
			want: fmt.Sprintf("--read-concurrency %d: want 1..%d", relay.MaxReadConcurrency+1, relay.MaxReadConcurrency)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got runConfig
			var err error
			cmd := &cli.Command{Name: "run", Flags: relayFlags(), Action: func(_ context.Context, cmd *cli.Command) error {
				got, err = parseRunFlags(cmd)
				return nil
			}}
			if rerr := cmd.Run(context.Background(), append([]string{"run", "--index", "orders"}, tt.args...)); rerr != nil {
				t.Fatal(rerr)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("parseRunFlags(%v) = %v, want it accepted", tt.args, err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("parseRunFlags(%v) = %v, want %q", tt.args, err, tt.want)
			}
			if tt.want == "" && got.feed.BatchSize*got.feed.ReadConcurrency == 0 {
				t.Fatalf("parseRunFlags(%v) kept no batch size or concurrency: %+v", tt.args, got.feed)
			}
		})
	}
	var usage strings.Builder
	for _, f := range relayFlags() {
		if u, ok := f.(interface{ GetUsage() string }); ok {
			usage.WriteString(u.GetUsage() + "\n")
		}
	}
	for _, want := range []string{fmt.Sprintf("(1..%d)", relay.MaxBatchSize), fmt.Sprintf("(1..%d;", relay.MaxReadConcurrency)} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("run's usage does not say %q", want)
		}
	}
}
