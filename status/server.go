package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/es-changefeed/es-changefeed/internal/logkey"
)

// DefaultSampleEvery is how often the server samples the feed for the
// page's charts; HistoryWindow is how far back they reach.
const (
	DefaultSampleEvery = 10 * time.Second
	HistoryWindow      = 15 * time.Minute
)

// Sample is one point of the page's charts.
type Sample struct {
	At time.Time `json:"at"`
	// EventsPerSecond is the rate of entries added to the stream since the
	// previous sample.
	EventsPerSecond float64 `json:"events_per_second"`
	// Lag is the largest lag: shard operations behind the global
	// checkpoint, or group entries not yet delivered.
	Lag int64 `json:"lag"`
	// Added is the stream's entries-added counter.
	Added int64 `json:"entries_added"`
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// Addr is the listen address, e.g. "127.0.0.1:9464". Required.
	Addr string
	// Gatherer provides /metrics. Required.
	Gatherer prometheus.Gatherer
	// Sources feed the page and /status.json. Required.
	Sources Sources
	// Health answers /healthz: the process is alive and its role is sound
	// (a relay leads or waits as a standby). Default: always healthy.
	Health func() (bool, string)
	// Ready answers /readyz: the process does its job now (a relay leads
	// and is not paused; a consumer reads). Default: same as Health.
	Ready func() (bool, string)
	// SampleEvery is the chart resolution. Default 10s.
	SampleEvery time.Duration
	// Logger receives serving errors. Default slog.Default().
	Logger *slog.Logger
}

// Server serves /metrics, /healthz, /readyz, /status.json and the status
// page (GET /).
type Server struct {
	cfg ServerConfig
	ln  net.Listener

	mu      sync.Mutex
	history []Sample
}

// NewServer listens on cfg.Addr (so the address is known, e.g. with port 0)
// and returns the server; Run serves.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Addr == "" || cfg.Gatherer == nil || cfg.Sources.Redis == nil {
		return nil, errors.New("status server: Addr, Gatherer and Sources.Redis are required")
	}
	if cfg.Health == nil {
		cfg.Health = func() (bool, string) { return true, "alive" }
	}
	if cfg.Ready == nil {
		cfg.Ready = cfg.Health
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("status server: listen on %s: %w", cfg.Addr, err)
	}
	return &Server{cfg: cfg, ln: ln}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", probe(s.cfg.Health))
	mux.HandleFunc("GET /readyz", probe(s.cfg.Ready))
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		rep, err := Gather(r.Context(), s.cfg.Sources)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Report
			History []Sample `json:"history"`
		}{rep, s.History()})
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		rep, err := Gather(r.Context(), s.cfg.Sources)
		if err != nil {
			http.Error(w, "cannot read the feed: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := RenderPage(w, rep, s.History()); err != nil {
			s.cfg.Logger.Warn("render the status page", logkey.Error, err.Error())
		}
	})
	return mux
}

func probe(f func() (bool, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ok, detail := f()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, detail)
	}
}

// History returns the samples of the last HistoryWindow, oldest first.
func (s *Server) History() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.history...)
}

// Run serves until ctx ends, sampling the feed for the charts.
func (s *Server) Run(ctx context.Context) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	s.sample(ctx)
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			return nil
		case err := <-errc:
			return err
		case <-t.C:
			s.sample(ctx)
		}
	}
}

// sample records one chart point.
func (s *Server) sample(ctx context.Context) {
	rep, err := Gather(ctx, s.cfg.Sources)
	if err != nil {
		return
	}
	p := Sample{At: rep.At, Added: rep.Stream.EntriesAdded, Lag: maxLag(rep)}
	if p.Added == 0 {
		p.Added = rep.Stream.Length // a server without entries-added (miniredis)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.history); n > 0 {
		prev := s.history[n-1]
		if dt := p.At.Sub(prev.At).Seconds(); dt > 0 && p.Added >= prev.Added {
			p.EventsPerSecond = float64(p.Added-prev.Added) / dt
		}
	}
	s.history = append(s.history, p)
	for len(s.history) > 0 && p.At.Sub(s.history[0].At) > HistoryWindow {
		s.history = s.history[1:]
	}
}

// maxLag is the largest shard or group lag of a report.
func maxLag(r Report) int64 {
	var m int64
	for _, ix := range r.Indices {
		for _, sh := range ix.Shards {
			if sh.Lag != nil && *sh.Lag > m {
				m = *sh.Lag
			}
		}
	}
	for _, g := range r.Groups {
		if g.Lag > m {
			m = g.Lag
		}
	}
	return m
}
