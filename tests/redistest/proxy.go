package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a Redis server and can lose the one
// transaction a test picks: the request holding EXEC not forwarded
// (DropNextExec), or forwarded with its reply never delivered
// (DropNextExecReply). Either way the client's connection is closed, so it
// sees the same error and cannot tell the two apart: the case of a commit
// in doubt. Everything else passes unchanged.
type Proxy struct {
	ln     net.Listener
	target string
	// mode is what happens to the next request holding EXEC.
	mode atomic.Int32
	// executed counts transactions whose reply was dropped after Redis
	// answered them (DropNextExecReply done).
	executed atomic.Int32
	// dropped counts transactions never forwarded (DropNextExec done).
	dropped atomic.Int32

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

const (
	proxyPass = iota
	proxyDropExec
	proxyDropExecReply
)

// StartProxy listens on a free 127.0.0.1 port and forwards to addr
// (host:port) until the test ends.
func StartProxy(tb testing.TB, addr string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: addr, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is redis://<Addr>/0.
func (p *Proxy) URL() string { return "redis://" + p.Addr() + "/0" }

// DropNextExec makes the proxy close the client's connection instead of
// forwarding the next request that holds EXEC: Redis discards the
// transaction with the connection.
func (p *Proxy) DropNextExec() { p.mode.Store(proxyDropExec) }

// DropNextExecReply makes the proxy forward the next request that holds
// EXEC, wait until Redis has answered it (no reply byte for 200 ms after
// the first), and close the client's connection without delivering the
// answer: Redis carried the transaction out, the client never hears it.
func (p *Proxy) DropNextExecReply() { p.mode.Store(proxyDropExecReply) }

// Executed is how many transactions had their reply dropped.
func (p *Proxy) Executed() int { return int(p.executed.Load()) }

// Dropped is how many transactions were never forwarded.
func (p *Proxy) Dropped() int { return int(p.dropped.Load()) }

// Close stops accepting and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, true)
		p.track(server, true)
		p.wg.Add(1)
		go p.pipe(client, server)
	}
}

// execMarker is EXEC as a client sends it (a RESP array of one bulk
// string), lowercased: go-redis sends "exec", redis-cli "EXEC".
var execMarker = []byte("$4\r\nexec\r\n")

// pipe forwards one client connection until either side closes.
func (p *Proxy) pipe(client, server net.Conn) {
	defer p.wg.Done()
	var swallow atomic.Bool // server -> client bytes are dropped
	replied := make(chan struct{}, 1)
	closeBoth := func() {
		_ = client.Close()
		_ = server.Close()
		p.track(client, false)
		p.track(server, false)
	}
	defer closeBoth()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if swallow.Load() {
					select {
					case replied <- struct{}{}:
					default:
					}
				} else if _, werr := client.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
			}
			if err != nil {
				closeBoth()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the previous read, for a marker split between reads
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			seen := append(tail, chunk...)
			holdsExec := bytes.Contains(bytes.ToLower(seen), execMarker)
			// Keep fewer bytes than the marker: a marker found next time
			// ends in the next read.
			tail = append(tail[:0], seen[max(0, len(seen)-len(execMarker)+1):]...)
			if holdsExec {
				switch p.mode.Load() {
				case proxyDropExec:
					p.mode.Store(proxyPass)
					p.dropped.Add(1)
					return
				case proxyDropExecReply:
					p.mode.Store(proxyPass)
					swallow.Store(true)
					if _, werr := server.Write(chunk); werr != nil {
						return
					}
					waitQuiet(replied, 200*time.Millisecond, 10*time.Second)
					p.executed.Add(1)
					return
				}
			}
			if _, werr := server.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitQuiet returns once a signal came on c and then none for quiet, or
// after limit.
func waitQuiet(c <-chan struct{}, quiet, limit time.Duration) {
	deadline := time.After(limit)
	select {
	case <-c:
	case <-deadline:
		return
	}
	for {
		select {
		case <-c:
		case <-time.After(quiet):
			return
		case <-deadline:
			return
		}
	}
}
