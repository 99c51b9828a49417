package esemu

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// indexSettings are the index settings the emulator models.
type indexSettings struct {
	shards          int
	replicas        int
	routingShards   int
	refreshInterval time.Duration // 0: disabled (-1)
	refreshExplicit bool
	maxResultWindow int
	gcDeletes       time.Duration
	hidden          bool
	mode            string // "", "standard", "time_series", "logsdb", and on ES 9.4+ "columnar", "logsdb_columnar"
	seqNoDisabled   bool
	// modRouting: the shard is hash mod shards, whatever routingShards
	// (indices created on Elasticsearch 9.4+, IndexVersions.MOD_ROUTING_FUNCTION).
	modRouting bool
	flat       map[string]string // every given setting, flattened "index.x" -> value
}

// settingSpec lists the index settings the emulator accepts. Anything else is
// refused as not modeled.
var settingSpec = map[string]bool{
	"index.number_of_shards":                     true,
	"index.number_of_replicas":                   true,
	"index.number_of_routing_shards":             true,
	"index.refresh_interval":                     true,
	"index.max_result_window":                    true,
	"index.gc_deletes":                           true,
	"index.hidden":                               true,
	"index.mode":                                 true,
	"index.routing_path":                         true,
	"index.time_series.start_time":               true,
	"index.time_series.end_time":                 true,
	"index.disable_sequence_numbers":             true,
	"index.seq_no.index_options":                 true,
	"index.uuid":                                 false, // private: refused
	"index.auto_expand_replicas":                 false,
	"index.routing_partition_size":               false,
	"index.soft_deletes.enabled":                 true,
	"index.translog.durability":                  true,
	"index.unassigned.node_left.delayed_timeout": true,
}

// flattenSettings turns {"index":{"number_of_shards":2}} or
// {"number_of_shards":"2"} or {"index.number_of_shards":2} into
// "index.number_of_shards" -> "2".
func flattenSettings(prefix string, in map[string]any, out map[string]string) {
	for k, v := range in {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		switch x := v.(type) {
		case map[string]any:
			flattenSettings(key, x, out)
		case []any:
			parts := make([]string, len(x))
			for i, p := range x {
				parts[i] = fmt.Sprint(p)
			}
			out[key] = strings.Join(parts, ",")
		case nil:
			out[key] = ""
		default:
			out[key] = fmt.Sprint(x)
		}
	}
}

func normalizeSettingKey(k string) string {
	if !strings.HasPrefix(k, "index.") {
		return "index." + k
	}
	return k
}

// parseSettings validates settings for a new index on flavor f.
func parseSettings(f Flavor, raw map[string]any) (indexSettings, *esError) {
	flat := map[string]string{}
	flattenSettings("", raw, flat)
	s := indexSettings{
		shards: 1, replicas: 1, refreshInterval: time.Second, maxResultWindow: 10000,
		gcDeletes: 60 * time.Second, flat: map[string]string{},
	}
	for k, v := range flat {
		k = normalizeSettingKey(k)
		allowed, known := settingSpec[k]
		if !known || !allowed {
			return s, errNotModeled("index setting [%s]", k)
		}
		s.flat[k] = v
	}
	geInt := func(key string, min int, dst *int) *esError {
		v, ok := s.flat[key]
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return errIllegalArgument("Failed to parse value [%s] for setting [%s]", v, key)
		}
		if n < min {
			return errIllegalArgument("Failed to parse value [%d] for setting [%s] must be >= %d", n, key, min)
		}
		*dst = n
		return nil
	}
	if e := geInt("index.number_of_shards", 1, &s.shards); e != nil {
		return s, e
	}
	if s.shards > 1024 {
		return s, errIllegalArgument("Failed to parse value [%d] for setting [index.number_of_shards] must be <= 1024", s.shards)
	}
	if e := geInt("index.number_of_replicas", 0, &s.replicas); e != nil {
		return s, e
	}
	if e := geInt("index.max_result_window", 1, &s.maxResultWindow); e != nil {
		return s, e
	}
	s.routingShards = routingNumShards(s.shards)
	if e := geInt("index.number_of_routing_shards", 1, &s.routingShards); e != nil {
		return s, e
	}
	if s.routingShards%s.shards != 0 {
		return s, errIllegalArgument("the number of source shards [%d] must be a factor of [%d]", s.shards, s.routingShards)
	}
	if v, ok := s.flat["index.refresh_interval"]; ok {
		s.refreshExplicit = true
		if v == "-1" {
			s.refreshInterval = 0
		} else {
			d, err := parseTimeValue(v)
			if err != nil {
				return s, errIllegalArgument("failed to parse setting [index.refresh_interval] with value [%s] as a time value: %v", v, err)
			}
			s.refreshInterval = d
		}
	}
	if v, ok := s.flat["index.gc_deletes"]; ok {
		d, err := parseTimeValue(v)
		if err != nil {
			return s, errIllegalArgument("failed to parse setting [index.gc_deletes] with value [%s] as a time value: %v", v, err)
		}
		s.gcDeletes = d
	}
	if v, ok := s.flat["index.hidden"]; ok {
		s.hidden = v == "true"
	}
	s.mode = s.flat["index.mode"]
	columnar := s.mode == "columnar" || s.mode == "logsdb_columnar"
	switch {
	case s.mode == "", s.mode == "standard", s.mode == "time_series", s.mode == "logsdb":
	case columnar && f.seqNoDisabling():
	default:
		return s, errIllegalArgument("unknown index mode [%s]", s.mode)
	}
	if v, ok := s.flat["index.disable_sequence_numbers"]; ok {
		if !f.seqNoDisabling() {
			return s, errUnknownSetting(f, "index.disable_sequence_numbers")
		}
		s.seqNoDisabled = v == "true"
	} else if f.seqNoDisabling() && columnar {
		// IndexSettings.DISABLE_SEQUENCE_NUMBERS defaults to true for the
		// strictly columnar modes only (ES 9.5.3); time_series keeps
		// sequence numbers (doc values only).
		s.seqNoDisabled = true
	}
	s.modRouting = f.modRouting()
	return s, nil
}

// parseTimeValue parses ES time values: 500ms, 1s, 2m, 1h, 1d, or a bare
// number of milliseconds.
func parseTimeValue(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	units := []struct {
		suffix string
		d      time.Duration
	}{{"nanos", time.Nanosecond}, {"micros", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}, {"d", 24 * time.Hour}}
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			n, err := strconv.ParseFloat(strings.TrimSuffix(v, u.suffix), 64)
			if err != nil {
				return 0, err
			}
			return time.Duration(n * float64(u.d)), nil
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("unit is missing or unrecognized")
	}
	return time.Duration(n) * time.Millisecond, nil
}

// aliasMeta is an alias as attached to one index.
type aliasMeta struct {
	isWriteIndex *bool
	isHidden     bool
	routing      string
}

// index is one concrete index.
type index struct {
	name       string
	uuid       string
	created    time.Time
	settings   indexSettings
	mappings   json.RawMessage
	closed     bool
	shards     []*shard
	aliases    map[string]*aliasMeta
	dataStream string // the data stream this index backs, if any
	system     bool
	stop       chan struct{} // closed when the index is deleted
}

// newUUID returns a 22-char URL-safe base64 id, as ES's UUIDs.randomBase64UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// newID returns a 20-char auto-generated document id.
func newID() string {
	var b [15]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (ix *index) shardFor(id, routing string) int {
	key := id
	if routing != "" {
		key = routing
	}
	if ix.settings.modRouting {
		return shardFor(key, ix.settings.shards, ix.settings.shards)
	}
	return shardFor(key, ix.settings.shards, ix.settings.routingShards)
}

// health is green when every copy is started, yellow when a replica is not,
// red when a primary is not.
func (ix *index) health() string {
	h := "green"
	for _, s := range ix.shards {
		s.mu.RLock()
		for _, c := range s.copies {
			if c.started {
				continue
			}
			if c.primary {
				h = "red"
			} else if h == "green" {
				h = "yellow"
			}
		}
		if s.primary() == nil {
			h = "red"
		}
		s.mu.RUnlock()
	}
	return h
}

func (ix *index) aliasNames() []string {
	names := make([]string, 0, len(ix.aliases))
	for n := range ix.aliases {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
