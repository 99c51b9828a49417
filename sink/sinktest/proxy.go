package sinktest

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a server (a Redis, a cluster's HTTP
// port) and, while its Gate hangs, holds what clients send: the server
// then stops answering, as a hung one does, without being touched. Point
// the sink's client at Addr, and read the sink's state past it.
type Proxy struct {
	Gate Gate

	ln     net.Listener
	target string
	ctx    context.Context // canceled by Close: releases what the Gate holds
	cancel context.CancelFunc

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// StartProxy listens on a free 127.0.0.1 port and forwards to addr
// (host:port) until tb ends.
func StartProxy(tb testing.TB, addr string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: addr, ctx: ctx, cancel: cancel, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting and closes every connection.
func (p *Proxy) Close() {
	p.cancel()
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track adds or removes a connection; false when the proxy is closed (the
// connection is then closed at once).
func (p *Proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !on {
		delete(p.conns, c)
		return true
	}
	if p.ctx.Err() != nil {
		_ = c.Close()
		return false
	}
	p.conns[c] = true
	return true
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
		if !p.track(client, true) || !p.track(server, true) {
			_ = server.Close()
			_ = client.Close()
			return
		}
		p.wg.Add(1)
		go p.pipe(client, server)
	}
}

// pipe forwards one connection until either side closes; what the client
// sends waits for the Gate.
func (p *Proxy) pipe(client, server net.Conn) {
	defer p.wg.Done()
	closeBoth := func() {
		_ = client.Close()
		_ = server.Close()
		p.track(client, false)
		p.track(server, false)
	}
	defer closeBoth()
	go func() {
		_, _ = io.Copy(client, server)
		closeBoth()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if p.Gate.Pass(p.ctx) != nil {
				return
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
