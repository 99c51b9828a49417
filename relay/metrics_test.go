package relay

import (
	"fmt"
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

// TestRelay_PollTicksAndResolutions: escf_poll_ticks_total counts a poll
// tick once, however many indices began a round on it, and
// escf_target_resolutions_total a resolution at most once per poll
// interval: neither exceeds the ticks elapsed since the relay was made
// (statsBatcher.tick), while 5 idle indices run up to 5 rounds a tick.
func TestRelay_PollTicksAndResolutions(t *testing.T) {
	e := newRoundEnv(t, "ticks")
	for i := range 5 {
		e.create(t, fmt.Sprintf("idx-%d", i), 1)
	}
	r := e.runner(t, []string{"idx-*"}, func(c *Config) { c.StatsWindow = 0 })
	rn := run(t, r)
	wait(t, "10 poll ticks", func() bool { return metric(t, r, "escf_poll_ticks_total") >= 10 })
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	elapsed := float64(r.stats.tick() + 1)
	ticks, resolutions, rounds := metric(t, r, "escf_poll_ticks_total"), metric(t, r, "escf_target_resolutions_total"), metric(t, r, "escf_rounds_total")
	t.Logf("%.0f ticks elapsed: %.0f poll ticks, %.0f resolutions, %.0f rounds", elapsed, ticks, resolutions, rounds)
	if ticks > elapsed || resolutions > elapsed || ticks > rounds {
		t.Errorf("%.0f ticks elapsed: %.0f poll ticks and %.0f resolutions counted (want at most one per tick), %.0f rounds", elapsed, ticks, resolutions, rounds)
	}
}
