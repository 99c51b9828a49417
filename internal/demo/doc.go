// Package demo is what `es-changefeed demo` runs, in one process: an
// emulated cluster (internal/esemu) of three nodes with out-of-order
// writes, an embedded Redis (miniredis), a writer that creates, updates
// and deletes orders (some with custom routing), the relay with delete
// detection, and a reader that prints every event of the stream. Run
// returns once the writer stopped, the feed caught up and replaying the
// stream reproduced the index exactly.
//
// It is a package of its own, not part of package main, so that the
// binary's CLI stays flags → configs → Run, and so that the one product
// package importing the emulator is named (TestImports_Layers in the
// module root holds it to that).
package demo
