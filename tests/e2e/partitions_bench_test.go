package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/es-changefeed/es-changefeed/internal/esemu"
	"github.com/es-changefeed/es-changefeed/redisx"
	"github.com/es-changefeed/es-changefeed/tests/redistest"
)

// BenchmarkRelays_Partitions measures the relay binary's throughput on a
// feed of 8 partitions with 1, 2 and 4 relay processes, against one relay
// on an unpartitioned feed (the baseline) in the same run: the emulator
// holds 100,000 documents in 16 shards before the relays start; the time
// is from their start until the streams hold an event per document. One
// redis-server; every process on this machine. Run with -benchtime 1x.
func BenchmarkRelays_Partitions(b *testing.B) {
	const docs, shards = 100000, 16
	binary(b)
	src := cluster(b, esemu.Config{})
	createIndex(b, src, rigIndex, shards, 0)
	for i := 0; i < docs; i += 1000 {
		var body strings.Builder
		for j := i; j < i+1000; j++ {
			fmt.Fprintf(&body, "{\"index\":{\"_index\":%q,\"_id\":\"d%d\"}}\n{\"n\":%d,\"note\":\"a note of moderate length to make the source realistic\"}\n", rigIndex, j, j)
		}
		if out := mustDo(b, "POST", src.URL()+"/_bulk", body.String()); strings.Contains(string(out), `"errors":true`) {
			b.Fatalf("bulk: %s", out)
		}
	}
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	// cpu is the CPU seconds Redis and this process (the emulator, the
	// harness) used so far.
	cpu := func() (redisCPU, self float64) {
		info, _ := rdb.Info(context.Background(), "cpu").Result()
		for _, l := range strings.Split(info, "\r\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, _ := strconv.ParseFloat(v, 64)
				redisCPU += f
			}
		}
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		return redisCPU, self
	}
	var share string
	run := func(feed string, relays, partitions int) float64 {
		r0, s0 := cpu()
		start := time.Now()
		var procs []*proc
		for i := 0; i < relays; i++ {
			procs = append(procs, startBinary(b, relayArgs(src, srv.URL(), feed, rigIndex,
				"--batch-size", "1000", "--lease-ttl", "1s", "--partitions", fmt.Sprint(partitions))...))
		}
		defer func() {
			var relayCPU float64
			for _, p := range procs {
				p.kill()
				relayCPU += (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()
			}
			r1, s1 := cpu()
			wall := time.Since(start).Seconds()
			share += fmt.Sprintf("\n%s (%d relays, P=%d): wall %.2fs; CPU relays %.2fs, redis %.2fs, emulator+harness %.2fs (2 cores: %.2fs)",
				feed, relays, partitions, wall, relayCPU, r1-r0, s1-s0, 2*wall)
		}()
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			var n int64
			for _, k := range redisx.AllPartitionKeys(feed, partitions) {
				l, _ := rdb.XLen(context.Background(), k.Events()).Result()
				n += l
			}
			if n >= docs {
				return float64(docs) / time.Since(start).Seconds()
			}
		}
		b.Fatalf("%s: the streams did not reach %d events in 5 minutes:\n%s", feed, docs, tail(procs[0].out.String(), 30))
		return 0
	}
	for i := 0; i < b.N; i++ {
		base := run(fmt.Sprintf("base%d", i), 1, 1)
		b.ReportMetric(base, "p1_relay1_events/s")
		for _, relays := range []int{1, 2, 4} {
			r := run(fmt.Sprintf("p8r%d-%d", relays, i), relays, 8)
			b.ReportMetric(r, fmt.Sprintf("p8_relays%d_events/s", relays))
			b.ReportMetric(r/base, fmt.Sprintf("p8_relays%d_ratio", relays))
		}
	}
	b.Log(share)
}
