// Package redisx is the Redis plumbing: clients from URLs, key names with hash
// tags, the lease, the consumer-group worker pool and safe trimming. It
// imports no feature package.
//
// The package is being built: see DESIGN.md section 1 and the open issues.
package redisx
