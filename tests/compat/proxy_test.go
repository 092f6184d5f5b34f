package compat

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// killProxy forwards TCP connections to a cellserver and can close them
// all at once, so that a client sees the server end its connection (as
// Redis's CLIENT KILL does) and must reconnect. A connection to its
// control address closes every forwarded connection, then itself: a
// script in another process triggers the kill that way.
type killProxy struct {
	addr, ctlAddr string
	target        string

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	kills int
}

// startKillProxy listens on two free loopback ports and forwards to target
// until the test ends.
func startKillProxy(t testing.TB, target string) *killProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &killProxy{addr: ln.Addr().String(), ctlAddr: ctl.Addr().String(), target: target,
		conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		ctl.Close()
		p.KillAll()
		wg.Wait()
	})
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.forward(c)
			}()
		}
	}()
	go func() {
		defer wg.Done()
		for {
			c, err := ctl.Accept()
			if err != nil {
				return
			}
			p.KillAll()
			c.Close()
		}
	}()
	return p
}

func (p *killProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
}

func (p *killProxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.track(c, s)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// KillAll closes every forwarded connection, both sides, and returns how
// many client connections it closed.
func (p *killProxy) KillAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2 // a client's connection and its own to the server
	p.conns = map[net.Conn]struct{}{}
	p.kills += n
	return n
}

// Kills returns how many client connections KillAll has closed so far.
func (p *killProxy) Kills() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kills
}

// scriptArgs are the arguments the Node and Python client scripts take:
// the proxy's host and port, its control port (a connection to it closes
// every proxied connection) and CL.INFO's tat_ns expected after the
// scenario's throttle calls (the injected clock's t0 + 2s, in ns).
func (p *killProxy) scriptArgs(t testing.TB) (host, port, ctlPort, wantTat string) {
	t.Helper()
	host, port, err := net.SplitHostPort(p.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, ctlPort, err = net.SplitHostPort(p.ctlAddr); err != nil {
		t.Fatal(err)
	}
	return host, port, ctlPort, strconv.FormatInt(t0.Add(2*time.Second).UnixNano(), 10)
}
