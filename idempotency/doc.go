// Package idempotency holds consumer-side fences so redelivered or reordered
// events are applied at most once and never older-over-newer.
//
// The package is being built: see DESIGN.md section 1 and the open issues.
package idempotency
