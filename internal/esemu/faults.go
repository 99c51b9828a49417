package esemu

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Request kinds a Fault can target. Each REST endpoint belongs to one kind.
const (
	KindAny        = "any"
	KindRoot       = "root"
	KindHealth     = "health"
	KindIndices    = "indices" // create, delete, open, close, get index/settings
	KindDoc        = "doc"     // index, create, delete, get, _update
	KindBulk       = "bulk"
	KindRefresh    = "refresh"
	KindStats      = "stats"
	KindSearch     = "search"
	KindCount      = "count"
	KindScroll     = "scroll"
	KindPIT        = "pit"
	KindResolve    = "resolve"
	KindAlias      = "alias"
	KindTemplate   = "template"
	KindDataStream = "data_stream"
	KindRollover   = "rollover"
	// KindClusterState is GET /_cluster/state (index metadata).
	KindClusterState = "cluster_state"
)

var faultKinds = []string{KindAny, KindRoot, KindHealth, KindIndices, KindDoc, KindBulk, KindRefresh,
	KindStats, KindSearch, KindCount, KindScroll, KindPIT, KindResolve, KindAlias, KindTemplate,
	KindDataStream, KindRollover, KindClusterState}

// Fault makes the next Count requests of a kind misbehave.
type Fault struct {
	// Kind is the request kind (KindSearch, KindBulk, ... or KindAny).
	Kind string `json:"kind"`
	// Status, when non-zero, answers with this HTTP status and ES's error body
	// for it (429: es_rejected_execution_exception; 503: unavailable).
	Status int `json:"status,omitempty"`
	// Delay holds the response this long before answering (slow responses).
	Delay time.Duration `json:"delay,omitempty"`
	// Drop closes the connection in the middle of the response, after the
	// request was carried out.
	Drop bool `json:"drop,omitempty"`
	// TimedOut answers a search or scroll page with "timed_out": true and
	// only half of its hits, as a search that hit its timeout does.
	TimedOut bool `json:"timed_out,omitempty"`
	// Count is how many requests the fault applies to. Default 1.
	Count int `json:"count,omitempty"`
}

func (f Fault) validate() error {
	ok := false
	for _, k := range faultKinds {
		ok = ok || f.Kind == k
	}
	if !ok {
		return fmt.Errorf("fault kind %q: use one of %s", f.Kind, strings.Join(faultKinds, ", "))
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		return fmt.Errorf("fault status %d: want a 4xx or 5xx status", f.Status)
	}
	if f.Status == 0 && f.Delay == 0 && !f.Drop && !f.TimedOut {
		return fmt.Errorf("fault does nothing: set status, delay, drop or timed_out")
	}
	if f.TimedOut && f.Kind != KindSearch && f.Kind != KindScroll {
		return fmt.Errorf("fault timed_out applies to kinds search and scroll, not %q", f.Kind)
	}
	if f.Count < 0 || f.Delay < 0 {
		return fmt.Errorf("fault count and delay must not be negative")
	}
	return nil
}

type faults struct {
	mu       sync.Mutex
	list     []*Fault
	hits     map[string]int // requests a fault was applied to, by kind
	requests map[string]int // requests served, by kind
}

// take consumes one application of the first fault matching kind.
func (fs *faults) take(kind string) (Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.list {
		if f.Kind != kind && f.Kind != KindAny {
			continue
		}
		out := *f
		f.Count--
		if f.Count <= 0 {
			fs.list = append(fs.list[:i], fs.list[i+1:]...)
		}
		if fs.hits == nil {
			fs.hits = map[string]int{}
		}
		fs.hits[kind]++
		return out, true
	}
	return Fault{}, false
}

// InjectFault queues a fault for the next requests of its kind.
func (c *Cluster) InjectFault(f Fault) error {
	if f.Count == 0 {
		f.Count = 1
	}
	if err := f.validate(); err != nil {
		return err
	}
	c.faults.mu.Lock()
	c.faults.list = append(c.faults.list, &f)
	c.faults.mu.Unlock()
	return nil
}

// ClearFaults drops every queued fault and shard search failure.
func (c *Cluster) ClearFaults() {
	c.faults.mu.Lock()
	c.faults.list = nil
	c.faults.mu.Unlock()
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, ix := range c.indices {
		for _, s := range ix.shards {
			s.mu.Lock()
			for _, cp := range s.copies {
				cp.failSearches = 0
			}
			s.mu.Unlock()
		}
	}
}

// FaultHits reports how many requests each kind of fault was applied to.
func (c *Cluster) FaultHits() map[string]int {
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.faults.hits {
		out[k] = v
	}
	return out
}

// PendingFaults lists the queued faults, sorted by kind.
func (c *Cluster) PendingFaults() []Fault {
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	out := make([]Fault, len(c.faults.list))
	for i, f := range c.faults.list {
		out[i] = *f
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// Copy selectors for FailShardSearches.
const (
	CopyAny     = "any"
	CopyPrimary = "primary"
	CopyReplica = "replica"
)

// FailShardSearches makes the next n shard-level reads (search, count,
// scroll, opening a PIT, PIT pages) tried on the selected copies of shard
// num fail. As in ES, a read that opens a view goes on to the shard's next
// copy; the response reports the shard in _shards.failed with a failures
// entry when every copy failed, or when a scroll or PIT page's copy did.
func (c *Cluster) FailShardSearches(indexName string, num int, which string, n int) error {
	s, err := c.lookupShard(indexName, num)
	if err != nil {
		return err
	}
	if which == "" {
		which = CopyAny
	}
	if which != CopyAny && which != CopyPrimary && which != CopyReplica {
		return fmt.Errorf("copy %q: use any, primary or replica", which)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cp := range s.copies {
		if which == CopyAny || (which == CopyPrimary) == cp.primary {
			cp.failSearches += n
		}
	}
	return nil
}

// StopFailingShardSearches cancels what FailShardSearches left pending on
// every copy of shard num.
func (c *Cluster) StopFailingShardSearches(indexName string, num int) error {
	s, err := c.lookupShard(indexName, num)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cp := range s.copies {
		cp.failSearches = 0
	}
	return nil
}

// countRequest counts one request of a kind (controls are not counted).
func (c *Cluster) countRequest(kind string) {
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	if c.faults.requests == nil {
		c.faults.requests = map[string]int{}
	}
	c.faults.requests[kind]++
}

// RequestCounts reports how many REST requests of each kind the cluster
// served (KindSearch, KindPIT, KindCount, ...), faulted or not.
func (c *Cluster) RequestCounts() map[string]int {
	c.faults.mu.Lock()
	defer c.faults.mu.Unlock()
	out := make(map[string]int, len(c.faults.requests))
	for k, v := range c.faults.requests {
		out[k] = v
	}
	return out
}
