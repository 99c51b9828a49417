// Package engine is the table of engine lines (versions.txt, embedded):
// each a product (Elasticsearch or OpenSearch) at one pinned version, with
// the Java it needs, its emulator alias and its compose file. The real
// nodes of tests/engines, the emulator's flavors (internal/esemu), demo,
// the golden recordings (tests/golden), CI and the docs read it or are
// checked against it, so that an engine line is named and versioned in one
// place.
package engine
