// Package logkey names the attribute keys of every log line the relay,
// the consumers and the CLI write (log/slog), so that one thing has one
// key everywhere: "error" for an error (never "err"), "index" and "shard"
// for a shard, "retry_in" for a backoff. A new key is added here.
package logkey
