// Package backoff is the one retry pause of the project: capped
// exponential, with jitter, for every loop that retries (the relay's
// rounds, lease and state reads, the consumers' reads and handler retries,
// the bootstrap copy, the settle polls).
package backoff
