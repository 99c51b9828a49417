package esemu

import (
	"fmt"
	"strings"

	"github.com/es-changefeed/es-changefeed/internal/engine"
)

// Flavor selects which engine line the emulator answers as: a name of the
// engine table (internal/engine), whose version it reports.
type Flavor string

// The flavors the emulator can answer as, one per line of the engine
// table.
const (
	FlavorES7         Flavor = "elasticsearch-7"
	FlavorES8         Flavor = "elasticsearch-8"
	FlavorES9         Flavor = "elasticsearch-9"
	FlavorOpenSearch2 Flavor = "opensearch-2"
	FlavorOpenSearch3 Flavor = "opensearch-3"
)

// Flavors lists every flavor, in the order of the engine table (tests
// iterate it).
var Flavors = flavors()

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

// build is what a line's version does not say: the engine's own answers
// at that version, as recorded from it (internal/esemu/testdata/golden/
// <line>/01-root.json; TestGolden compares lucene and the minimum
// versions). A new line needs one; a new version of a line may change them
// (re-recording shows it).
type build struct {
	lucene, minWire, minIndex, hash, date string
	// indexVersion is Elasticsearch 8+'s IndexVersion id of new indices
	// (IndexVersions.csv; 7 and OpenSearch derive it from the version).
	indexVersion string
}

var builds = map[Flavor]build{
	FlavorES7: {lucene: "8.11.3", minWire: "6.8.0", minIndex: "6.0.0-beta1",
		hash: "580aff1a0064ce4c93293aaab6fcc55e22c10d1c", date: "2025-06-19T01:37:57.847711500Z"},
	FlavorES8: {lucene: "9.12.2", minWire: "7.17.0", minIndex: "7.0.0", indexVersion: "8537000",
		hash: "4fe44c255c3d0da06779b921e132cdc555ed9aff", date: "2026-08-26T22:10:47.574903747Z"},
	FlavorES9: {lucene: "10.5.1", minWire: "8.19.0", minIndex: "8.0.0", indexVersion: "9111000",
		hash: "367ec317ec5f668dd864d41be06052a567102fec", date: "2026-09-01T16:11:59.322249404Z"},
	FlavorOpenSearch2: {lucene: "9.12.3", minWire: "7.10.0", minIndex: "7.0.0",
		hash: "97d3c13bf22a4a72ac11dc503fe44c97662b9161", date: "2026-07-01T04:27:16.038403104Z"},
	FlavorOpenSearch3: {lucene: "10.5.1", minWire: "2.19.0", minIndex: "2.0.0",
		hash: "4ee42a94e87f66fbf1e62a9871b1b87f91e02472", date: "2026-09-23T01:01:31.883915140Z"},
}

var flavorInfos = newFlavorInfos()

// flavors are the table's lines the emulator has a build for.
func flavors() []Flavor {
	var out []Flavor
	for _, l := range engine.Lines() {
		if _, ok := builds[Flavor(l.Name)]; ok {
			out = append(out, Flavor(l.Name))
		}
	}
	return out
}

// newFlavorInfos joins each line of the engine table with its build.
func newFlavorInfos() map[Flavor]flavorInfo {
	out := map[Flavor]flavorInfo{}
	for _, l := range engine.Lines() {
		b, ok := builds[Flavor(l.Name)]
		if !ok {
			continue
		}
		i := flavorInfo{number: l.Version, lucene: b.lucene, minWire: b.minWire, minIndex: b.minIndex,
			buildHash: b.hash, buildDate: b.date, openSearch: l.OpenSearch(), major: l.Major(), minor: l.Minor()}
		switch {
		case l.OpenSearch():
			i.tagline, i.distribution = "The OpenSearch Project: https://opensearch.org/", "opensearch"
			i.indexVersion = fmt.Sprint(versionID(l) ^ 0x08000000)
		case l.Major() == 7:
			i.tagline = "You Know, for Search"
			i.indexVersion, i.commitVersion = fmt.Sprint(versionID(l)), l.Version
		default:
			i.tagline = "You Know, for Search"
			i.indexVersion, i.commitVersion = b.indexVersion, b.indexVersion
		}
		out[Flavor(l.Name)] = i
	}
	return out
}

// versionID is the engines' Version id of a release: major*1000000 +
// minor*10000 + revision*100 + 99.
func versionID(l engine.Line) int {
	return l.Major()*1000000 + l.Minor()*10000 + l.Patch()*100 + 99
}

// ParseFlavor maps a flavor name ("elasticsearch-9", "opensearch-3", …, or
// a former name such as "es-9") to a Flavor.
func ParseFlavor(s string) (Flavor, error) {
	l, err := engine.Lookup(s)
	if err != nil {
		return "", err
	}
	if _, ok := flavorInfos[Flavor(l.Name)]; !ok {
		return "", fmt.Errorf("the emulator has no flavor for %s: want one of %s", l, strings.Join(flavorNames(), ", "))
	}
	return Flavor(l.Name), nil
}

func flavorNames() []string {
	out := make([]string, len(Flavors))
	for i, f := range Flavors {
		out[i] = string(f)
	}
	return out
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

// Version is the product version the flavor answers with: its line's in
// the engine table, e.g. "9.5.3".
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
