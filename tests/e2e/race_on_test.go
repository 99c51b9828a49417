//go:build race

package e2e

// raceBuild: this test binary runs under the race detector (see
// raceBinary for the es-changefeed binary it starts).
const raceBuild = true
