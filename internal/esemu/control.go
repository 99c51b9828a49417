package esemu

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The /_esemu/... HTTP controls mirror the Go control API for the
// standalone binary. They never require auth and are never faulted.

func ctlErr(status int, err error) *esError {
	return newError(status, "esemu_control_exception", "%v", err)
}

func ctlState(c *Cluster, r *request) (reply, *esError) {
	var shards []ShardState
	for _, name := range c.IndexNames() {
		c.mu.RLock()
		ix := c.indices[name]
		n := 0
		if ix != nil {
			n = len(ix.shards)
		}
		c.mu.RUnlock()
		for i := 0; i < n; i++ {
			if st, err := c.ShardState(name, i); err == nil {
				shards = append(shards, st)
			}
		}
	}
	scrolls, pits := c.OpenContexts()
	return reply{status: 200, body: obj("flavor", c.cfg.Flavor, "version", c.info.number, "nodes", c.Nodes(),
		"shards", shards, "open_scrolls", scrolls, "open_pits", pits, "faults", c.PendingFaults(), "fault_hits", c.FaultHits())}, nil
}

func ctlNodes(c *Cluster, r *request) (reply, *esError) {
	return reply{status: 200, body: obj("nodes", c.Nodes())}, nil
}

func nodeVar(r *request) (int, *esError) {
	n, err := strconv.Atoi(r.vars["n"])
	if err != nil {
		return 0, errIllegalArgument("node [%s] is not a number", r.vars["n"])
	}
	return n, nil
}

func ctlKill(c *Cluster, r *request) (reply, *esError) {
	n, e := nodeVar(r)
	if e != nil {
		return reply{}, e
	}
	if err := c.KillNode(n); err != nil {
		return reply{}, ctlErr(http.StatusBadRequest, err)
	}
	return reply{status: 200, body: obj("acknowledged", true, "nodes", c.Nodes())}, nil
}

func ctlRestart(c *Cluster, r *request) (reply, *esError) {
	n, e := nodeVar(r)
	if e != nil {
		return reply{}, e
	}
	if err := c.RestartNode(n); err != nil {
		return reply{}, ctlErr(http.StatusBadRequest, err)
	}
	return reply{status: 200, body: obj("acknowledged", true, "nodes", c.Nodes())}, nil
}

func ctlFaults(c *Cluster, r *request) (reply, *esError) {
	return reply{status: 200, body: obj("faults", c.PendingFaults(), "hits", c.FaultHits())}, nil
}

// faultBody is the JSON form of a Fault (delay as a time value string).
type faultBody struct {
	Kind     string `json:"kind"`
	Status   int    `json:"status"`
	Delay    string `json:"delay"`
	Drop     bool   `json:"drop"`
	TimedOut bool   `json:"timed_out"`
	Count    int    `json:"count"`
}

func ctlAddFault(c *Cluster, r *request) (reply, *esError) {
	var fb faultBody
	if err := json.Unmarshal(r.body, &fb); err != nil {
		return reply{}, ctlErr(http.StatusBadRequest, err)
	}
	f := Fault{Kind: fb.Kind, Status: fb.Status, Drop: fb.Drop, TimedOut: fb.TimedOut, Count: fb.Count}
	if fb.Delay != "" {
		d, err := parseTimeValue(fb.Delay)
		if err != nil {
			return reply{}, ctlErr(http.StatusBadRequest, err)
		}
		f.Delay = d
	}
	if err := c.InjectFault(f); err != nil {
		return reply{}, ctlErr(http.StatusBadRequest, err)
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

func ctlClearFaults(c *Cluster, r *request) (reply, *esError) {
	c.ClearFaults()
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

func ctlGCPSync(c *Cluster, r *request) (reply, *esError) {
	c.SyncGlobalCheckpoints()
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

func shardVars(r *request) (string, int, *esError) {
	n, err := strconv.Atoi(r.vars["shard"])
	if err != nil {
		return "", 0, errIllegalArgument("shard [%s] is not a number", r.vars["shard"])
	}
	return r.vars["index"], n, nil
}

func ctlShard(c *Cluster, r *request) (reply, *esError) {
	idx, n, e := shardVars(r)
	if e != nil {
		return reply{}, e
	}
	st, err := c.ShardState(idx, n)
	if err != nil {
		return reply{}, ctlErr(http.StatusNotFound, err)
	}
	return reply{status: 200, body: st}, nil
}

func ctlHistory(c *Cluster, r *request) (reply, *esError) {
	idx, n, e := shardVars(r)
	if e != nil {
		return reply{}, e
	}
	cp, e := r.intParam("copy", 0)
	if e != nil {
		return reply{}, e
	}
	ops, err := c.History(idx, n, cp)
	if err != nil {
		return reply{}, ctlErr(http.StatusNotFound, err)
	}
	if ops == nil {
		ops = []Op{}
	}
	return reply{status: 200, body: obj("ops", ops)}, nil
}

func ctlFailSearches(c *Cluster, r *request) (reply, *esError) {
	idx, n, e := shardVars(r)
	if e != nil {
		return reply{}, e
	}
	count, e := r.intParam("count", 1)
	if e != nil {
		return reply{}, e
	}
	if err := c.FailShardSearches(idx, n, r.param("copy"), count); err != nil {
		return reply{}, ctlErr(http.StatusBadRequest, err)
	}
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

// httpHolds keeps the holds placed over HTTP until they are released.
var httpHolds sync.Map // key "<cluster ptr>/<index>/<shard>" -> *Hold

func holdKey(c *Cluster, idx string, n int) string {
	return c.uuid + "/" + idx + "/" + strconv.Itoa(n)
}

func ctlHold(c *Cluster, r *request) (reply, *esError) {
	idx, n, e := shardVars(r)
	if e != nil {
		return reply{}, e
	}
	h, err := c.Hold(idx, n)
	if err != nil {
		return reply{}, ctlErr(http.StatusNotFound, err)
	}
	httpHolds.Store(holdKey(c, idx, n), h)
	return reply{status: 200, body: obj("acknowledged", true)}, nil
}

func ctlRelease(c *Cluster, r *request) (reply, *esError) {
	idx, n, e := shardVars(r)
	if e != nil {
		return reply{}, e
	}
	v, ok := httpHolds.LoadAndDelete(holdKey(c, idx, n))
	if !ok {
		return reply{}, ctlErr(http.StatusNotFound, errNoHold)
	}
	h := v.(*Hold)
	arrived := false
	select {
	case <-h.Arrived():
		arrived = true
	case <-time.After(0):
	}
	var seqs []int64
	if arrived {
		seqs = h.Seqs()
	}
	h.Release()
	return reply{status: 200, body: obj("acknowledged", true, "parked_seq_nos", seqs, "had_parked_batch", arrived)}, nil
}

type holdError string

func (e holdError) Error() string { return string(e) }

const errNoHold = holdError("no hold is placed on that shard: POST .../hold first")
