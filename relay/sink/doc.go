// Package sink holds the consumer-side sinks that apply change events: stdout
// JSON lines, file, HTTP webhook, a _bulk mirror into another cluster, and
// Redis cache invalidation.
//
// The package is being built: see DESIGN.md section 1 and the open issues.
package sink
