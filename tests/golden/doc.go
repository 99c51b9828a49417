// Package golden holds the golden-response script: a fixed, deterministic
// sequence of HTTP calls covering every call the relay, resync, status, the
// delete scanner and the bulk sink make (and the errors they must tell
// apart), run once against each real engine to record what it answers
// (tests/golden/cmd/golden writes internal/esemu/testdata/golden/<engine>/), and
// replayed against the emulator to compare its answers with the recordings
// (internal/esemu/golden_test.go).
//
// The script is defined once, in Script; Run carries it out against a URL;
// File is one recorded call; Compare says how an answer differs from a
// recording: by shape (status, the set of fields at every level, JSON types,
// with integers and fractions told apart, array lengths) and, at the paths a
// step names (and a few everywhere, see sameEverywhere), by value.
// Everything else (uuids, took, node ids, timestamps, PIT and scroll ids,
// versions, build hashes, cluster names) is compared by type only. Values
// compared are normalized first: a value a step captured (a node id, a
// backing index name) reads as its {{name}}, and dates in index names
// (yyyy.MM.dd) as <date>.
//
// Run is not safe for concurrent use of one *Runner; Compare is a pure
// function.
package golden
