//go:build !race

package e2e

// raceBuild: this test binary runs without the race detector, nor does
// the es-changefeed binary it starts (raceBinary).
const raceBuild = false
