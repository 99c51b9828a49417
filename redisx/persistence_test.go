package redisx_test

import (
	"context"
	"strings"
	"testing"

	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// TestReadPersistence: what a real server says of its persistence, and
// the risk the relay warns about at start for each setting.
func TestReadPersistence(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantRisk string // a word of the warning; "" for none
	}{
		{"appendfsync always", []string{"--appendonly", "yes", "--appendfsync", "always"}, ""},
		{"appendfsync everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, "2 s"},
		{"snapshots only", []string{"--appendonly", "no", "--save", "60 1"}, "snapshot"},
		{"nothing", nil, "persists nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{Args: tt.args})
			p, err := redisx.ReadPersistence(context.Background(), srv.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			risk := p.Risk()
			if (tt.wantRisk == "") != (risk == "") || !strings.Contains(risk, tt.wantRisk) {
				t.Errorf("%+v: Risk() = %q, want one saying %q", p, risk, tt.wantRisk)
			}
		})
	}
}
