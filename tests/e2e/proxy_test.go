package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
)

// requestCounter counts the REST requests a cluster served by kind
// (esemu.KindSearch, …): the emulator's own counts, or a countingProxy's in
// front of a real cluster.
type requestCounter interface {
	RequestCounts() map[string]int
}

// countingProxy forwards every request to a real cluster unchanged and
// counts them by kind as the emulator does, so that a test can ask what
// the relay cost the cluster: point the relay at URL(), everything else at
// the cluster.
type countingProxy struct {
	srv    *httptest.Server
	mu     sync.Mutex
	counts map[string]int
	took   map[string]time.Duration // by kind: request in to answer out
}

// newCountingProxy serves on 127.0.0.1 until the test ends.
func newCountingProxy(tb testing.TB, target string) *countingProxy {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	p := &countingProxy{counts: map[string]int{}, took: map[string]time.Duration{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := requestKind(r)
		p.mu.Lock()
		p.counts[kind]++
		p.mu.Unlock()
		began := time.Now()
		rp.ServeHTTP(w, r)
		p.mu.Lock()
		p.took[kind] += time.Since(began)
		p.mu.Unlock()
	}))
	tb.Cleanup(p.srv.Close)
	return p
}

// Took is the time the requests forwarded so far took, by kind, from
// their arrival to the end of their answer.
func (p *countingProxy) Took() map[string]time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.took)
}

// URL is the proxy's address.
func (p *countingProxy) URL() string { return p.srv.URL }

// RequestCounts are the requests forwarded so far, by kind.
func (p *countingProxy) RequestCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// requestsDuring counts the requests c served during about d: the total,
// sorted "kind n" per kind, and the time they were counted over (a
// loaded machine sleeps longer than d). For a figure per second; a bound
// per poll is decided from the relay's counters (idle_test.go).
func requestsDuring(c requestCounter, d time.Duration) (int, string, time.Duration) {
	q0, start := c.RequestCounts(), time.Now()
	time.Sleep(d)
	q1, took := c.RequestCounts(), time.Since(start)
	total := 0
	var kinds []string
	for k, v := range q1 {
		if n := v - q0[k]; n > 0 {
			total += n
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	sort.Strings(kinds)
	return total, strings.Join(kinds, ", "), took
}

// requestKind classifies a request as the emulator's routes do.
func requestKind(r *http.Request) string {
	path := r.URL.Path
	has := func(s string) bool { return strings.Contains(path, s) }
	switch {
	case path == "/" || path == "":
		return esemu.KindRoot
	case has("/_cluster/health"):
		return esemu.KindHealth
	case has("/_bulk"):
		return esemu.KindBulk
	case has("/_refresh"):
		return esemu.KindRefresh
	case has("/_stats"):
		return esemu.KindStats
	case has("/_search/scroll"):
		return esemu.KindScroll // a scroll's first page is a search, as in the emulator
	case has("/_search/point_in_time"), has("/_pit"):
		return esemu.KindPIT
	case has("/_search"):
		return esemu.KindSearch
	case has("/_count"):
		return esemu.KindCount
	case has("/_resolve/index"):
		return esemu.KindResolve
	case has("/_alias"):
		return esemu.KindAlias
	case has("/_index_template"):
		return esemu.KindTemplate
	case has("/_data_stream"):
		return esemu.KindDataStream
	case has("/_rollover"):
		return esemu.KindRollover
	case has("/_doc/"), has("/_update/"), has("/_create/"):
		return esemu.KindDoc
	}
	return esemu.KindIndices
}
