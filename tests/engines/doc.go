// Package engines starts real Elasticsearch and OpenSearch nodes for tests,
// one JVM per node on 127.0.0.1, from the jars Maven Central publishes (the
// server, its HTTP transport plugin and the test framework's MockNode):
// opensearch-2, opensearch-3, elasticsearch-7, elasticsearch-8 and
// elasticsearch-9, pinned in the engine table (internal/engine).
//
// Start (or StartTB in a test) returns a Cluster once it is green; its
// methods kill (SIGKILL), stop, start, pause (SIGSTOP) and resume nodes, and
// Close stops every JVM it started. Prepare resolves an engine's class path
// once (Maven, cached in ~/.m2 and CacheDir). See README.md for what these
// embedded nodes lack and why.
package engines
