package bootstrap

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
)

// progress counts the documents handed and reports them: to the callback
// after every page, to the log every interval.
type progress struct {
	log      *slog.Logger
	report   func(done, total int64)
	interval time.Duration
	total    int64 // documents when the copy began (_count), 0 when unknown
	done     int64
	start    time.Time
	lastLog  time.Time
}

func newProgress(log *slog.Logger, total int64, report func(done, total int64), interval time.Duration) *progress {
	now := time.Now()
	return &progress{log: log, report: report, interval: interval, total: total, start: now, lastLog: now}
}

// add counts n documents (negative: a shard's pages thrown away before it
// is read again).
func (p *progress) add(n int64) {
	p.done += n
	if p.report != nil {
		p.report(p.done, max(p.total, p.done))
	}
	if p.interval < 0 || time.Since(p.lastLog) < p.interval {
		return
	}
	p.lastLog = time.Now()
	rate := float64(p.done) / max(time.Since(p.start).Seconds(), 1e-9)
	args := []any{logkey.Documents, p.done, logkey.Total, p.total, logkey.PerSecond, int64(rate)}
	if p.total > 0 {
		args = append(args, logkey.Percent, fmt.Sprintf("%.1f", 100*float64(p.done)/float64(p.total)))
		if left := p.total - p.done; left > 0 && rate > 0 {
			args = append(args, logkey.ETA, (time.Duration(float64(left)/rate) * time.Second).Round(time.Second).String())
		}
	}
	p.log.Info("bootstrap copy", args...)
}

// finish logs the end of the copy.
func (p *progress) finish() {
	took := time.Since(p.start)
	p.log.Info("bootstrap copy: done", logkey.Documents, p.done, logkey.Took, took.Round(time.Millisecond).String(),
		logkey.PerSecond, int64(float64(p.done)/max(took.Seconds(), 1e-9)))
}
