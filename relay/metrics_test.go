package relay

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestNewMetrics_Register: the relay's collectors on a Registerer that
// already has them are an error to return, not a panic.
func TestNewMetrics_Register(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatalf("first registration: %v", err)
	}
	if _, err := newMetrics(reg); err == nil {
		t.Fatal("second registration on the same Registerer: no error")
	}
	if _, err := newMetrics(nil); err != nil {
		t.Fatalf("no Registerer: %v", err)
	}
}
