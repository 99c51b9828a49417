package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/es-changefeed/es-changefeed/deletes"
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

// TestParseRunFlags_DeleteScan: by default a shard's delete scans are
// paced by the budget alone (no least interval); the budget is a share of
// wall time in (0, 1] and, like the interval, needs --deletes.
func TestParseRunFlags_DeleteScan(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     string // "" accepted
		interval time.Duration
		budget   float64
	}{
		{name: "defaults", args: []string{"--deletes"}, budget: deletes.DefaultBudget},
		{name: "interval 0 and budget 1", args: []string{"--deletes", "--delete-scan-interval", "0", "--delete-scan-budget", "1"}, budget: 1},
		{name: "an interval", args: []string{"--deletes", "--delete-scan-interval", "2m"}, interval: 2 * time.Minute, budget: deletes.DefaultBudget},
		{name: "budget 0", args: []string{"--deletes", "--delete-scan-budget", "0"}, want: "--delete-scan-budget 0: want a share of wall time"},
		{name: "budget above 1", args: []string{"--deletes", "--delete-scan-budget", "1.5"}, want: "--delete-scan-budget 1.5: want a share of wall time"},
		{name: "negative interval", args: []string{"--deletes", "--delete-scan-interval", "-1s"}, want: "--delete-scan-interval -1s: want 0 or a positive duration"},
		{name: "budget without --deletes", args: []string{"--delete-scan-budget", "0.5"}, want: "--delete-scan-budget needs --deletes"},
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
				err = rerr
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("run %v: %v, want it accepted", tt.args, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("run %v: %v, want %q", tt.args, err, tt.want)
			case tt.want != "":
				return
			}
			if d := got.feed.Deletes; d.Interval != tt.interval || d.Budget != tt.budget {
				t.Errorf("run %v: interval %s, budget %g; want %s, %g", tt.args, d.Interval, d.Budget, tt.interval, tt.budget)
			}
		})
	}
}
