package demo_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/demo"
)

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name string
		cfg  demo.Config
		want string // "" valid
	}{
		{name: "zero", cfg: demo.Config{}},
		{name: "every flavor", cfg: demo.Config{Flavor: demo.Flavors()[len(demo.Flavors())-1]}},
		{name: "a former name", cfg: demo.Config{Flavor: "es-9"}},
		{name: "unknown flavor", cfg: demo.Config{Flavor: "solr-9"}, want: `Flavor: unknown engine "solr-9"`},
		{name: "negative duration", cfg: demo.Config{Duration: -time.Second}, want: "Duration = -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestRun: a short demo prints events as JSON lines, serves its feed to
// Serve, and ends saying the stream reproduced the index.
func TestRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	served := false
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := demo.Run(ctx, demo.Config{Duration: time.Second, Stdout: &stdout, Stderr: &stderr,
		Serve: func(_ context.Context, o demo.Ops) error {
			served = o.Redis != nil && o.ES != nil && o.Keys.Feed() == "demo" && o.Health != nil && o.Ready != nil
			return nil
		}})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	if !served {
		t.Error("Serve was not called with the feed's Redis, keys, client and probes")
	}
	if !strings.Contains(stderr.String(), "replaying the stream gives the") {
		t.Errorf("stderr lacks the final check:\n%s", stderr.String())
	}
	lines := 0
	for sc := bufio.NewScanner(&stdout); sc.Scan(); lines++ {
		var e struct {
			Op, Index string
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Index != demo.Index || (e.Op != "upsert" && e.Op != "delete") {
			t.Fatalf("line %d: %s: want an upsert or delete of %s (%v)", lines+1, sc.Bytes(), demo.Index, err)
		}
	}
	if lines == 0 {
		t.Fatal("no event printed")
	}
}
