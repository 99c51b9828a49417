package esemu

import (
	"fmt"
	"strings"
)

// Flavor selects which product and version the emulator answers as.
type Flavor string

// The flavors the emulator can answer as.
const (
	FlavorES7         Flavor = "es-7"
	FlavorES8         Flavor = "es-8"
	FlavorES9         Flavor = "es-9"
	FlavorOpenSearch2 Flavor = "opensearch-2"
	FlavorOpenSearch3 Flavor = "opensearch-3"
)

// Flavors lists every flavor, in a stable order (tests iterate it).
var Flavors = []Flavor{FlavorES7, FlavorES8, FlavorES9, FlavorOpenSearch2, FlavorOpenSearch3}

// flavorInfo is what a flavor says about itself in GET / and where its APIs
// differ.
type flavorInfo struct {
	number       string
	lucene       string
	minWire      string
	minIndex     string
	buildHash    string
	buildDate    string
	openSearch   bool
	major        int
	minor        int
	tagline      string
	distribution string
	// indexVersion is index.version.created of a new index: Elasticsearch
	// 7's Version id, 8/9's IndexVersion id (IndexVersions.csv), OpenSearch's
	// Version id (major*1000000+minor*10000+revision*100+99, xor 0x08000000).
	indexVersion string
	// commitVersion is es_version in a commit's user data (Elasticsearch
	// only: 7 writes the version string, 8/9 the IndexVersion id).
	commitVersion string
}

var flavorInfos = map[Flavor]flavorInfo{
	FlavorES7: {number: "7.17.28", lucene: "8.11.3", minWire: "6.8.0", minIndex: "6.0.0-beta1",
		buildHash: "139cb5a961d8de68b8e02c45cc47f5289a3623af", buildDate: "2025-02-20T09:05:31.349013687Z",
		major: 7, minor: 17, tagline: "You Know, for Search", indexVersion: "7172899", commitVersion: "7.17.28"},
	FlavorES8: {number: "8.19.23", lucene: "9.12.2", minWire: "7.17.0", minIndex: "7.0.0",
		buildHash: "4c4a8b6e1a9d1f3a9c5e5a0e2f3e0b4b8c1d2e3f", buildDate: "2026-09-30T10:11:12.123456789Z",
		major: 8, minor: 19, tagline: "You Know, for Search", indexVersion: "8537000", commitVersion: "8537000"},
	FlavorES9: {number: "9.5.5", lucene: "10.3.2", minWire: "8.19.0", minIndex: "8.0.0",
		buildHash: "9f2c1d4e5b6a7c8d9e0f1a2b3c4d5e6f7a8b9c0d", buildDate: "2026-10-28T08:09:10.111213141Z",
		major: 9, minor: 5, tagline: "You Know, for Search", indexVersion: "9111000", commitVersion: "9111000"},
	FlavorOpenSearch2: {number: "2.19.7", lucene: "9.12.3", minWire: "7.10.0", minIndex: "7.0.0",
		buildHash: "2a1b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d", buildDate: "2026-08-14T12:13:14.151617181Z",
		openSearch: true, major: 2, minor: 19, distribution: "opensearch", indexVersion: "136408527",
		tagline: "The OpenSearch Project: https://opensearch.org/"},
	FlavorOpenSearch3: {number: "3.9.0", lucene: "10.3.1", minWire: "2.19.0", minIndex: "2.0.0",
		buildHash: "3b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e", buildDate: "2026-10-02T11:12:13.141516171Z",
		openSearch: true, major: 3, minor: 9, distribution: "opensearch", indexVersion: "137307827",
		tagline: "The OpenSearch Project: https://opensearch.org/"},
}

// ParseFlavor maps a flavor name ("es-9", "opensearch-3", ...) to a Flavor.
func ParseFlavor(s string) (Flavor, error) {
	f := Flavor(strings.ToLower(strings.TrimSpace(s)))
	if _, ok := flavorInfos[f]; ok {
		return f, nil
	}
	names := make([]string, len(Flavors))
	for i, f := range Flavors {
		names[i] = string(f)
	}
	return "", fmt.Errorf("unknown flavor %q: use one of %s", s, strings.Join(names, ", "))
}

func (f Flavor) info() flavorInfo { return flavorInfos[f] }

// withVersion reports number v instead (Config.Version); an OpenSearch
// version 7.x is the compatibility override, which drops the distribution.
func (i flavorInfo) withVersion(v string) flavorInfo {
	if v == "" {
		return i
	}
	i.number = v
	if i.openSearch && strings.HasPrefix(v, "7.") {
		i.distribution = ""
	}
	return i
}

// OpenSearch reports whether the flavor answers as OpenSearch.
func (f Flavor) OpenSearch() bool { return f.info().openSearch }

// Version is the product version the flavor answers with, e.g. "9.5.5".
func (f Flavor) Version() string { return f.info().number }

// seqNoDisabling reports whether index.disable_sequence_numbers exists
// (Elasticsearch 9.4+).
func (f Flavor) seqNoDisabling() bool {
	i := f.info()
	return !i.openSearch && (i.major > 9 || (i.major == 9 && i.minor >= 4))
}

// indexHealthInStats reports whether _stats carries index-level health and
// status (Elasticsearch 8.1+).
func (f Flavor) indexHealthInStats() bool {
	i := f.info()
	return !i.openSearch && i.major >= 8
}

// searchIdleInStats reports whether shard stats carry search_idle (ES 8.9+).
func (f Flavor) searchIdleInStats() bool {
	i := f.info()
	return !i.openSearch && i.major >= 8
}

// destructiveRequiresName reports whether deleting indices by wildcard is
// refused by default (action.destructive_requires_name, true since ES 8.0).
func (f Flavor) destructiveRequiresName() bool {
	i := f.info()
	return !i.openSearch && i.major >= 8
}

// modRouting reports whether new indices route by hash mod shards
// (Elasticsearch 9.4+: IndexRouting uses RoutingFunction.moduloNumberOfShards
// for indices created on or after IndexVersions.MOD_ROUTING_FUNCTION; older
// indices, and every OpenSearch, use routing_num_shards and the routing factor).
func (f Flavor) modRouting() bool {
	i := f.info()
	return !i.openSearch && (i.major > 9 || (i.major == 9 && i.minor >= 4))
}
