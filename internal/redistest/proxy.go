package redistest

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is an in-test TCP proxy in front of one Redis address, used to inject
// faults (stall, black hole, delay, reset, refuse) for certainty tests. Modes apply to all
// connections and can be switched at any time.
type Proxy struct {
	target string
	addr   string

	up, down atomic.Int64

	mu      sync.Mutex
	mode    proxyMode
	delay   time.Duration
	resetN  int64
	changed chan struct{} // closed and replaced on every mode change
	ln      net.Listener
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type proxyMode int

const (
	modePass proxyMode = iota
	modeStall
	modeDelay
	modeReset
	modeRefuse
	modeBlackhole
)

type proxyConn struct {
	client, server *net.TCPConn
	// budget is the number of client->server bytes still allowed before a
	// reset; negative means unlimited.
	budget atomic.Int64
	// dropped: Blackhole discarded client->server bytes of this
	// connection (guarded by Proxy.mu); its command stream has a gap.
	dropped bool
	once    sync.Once
}

// NewProxy starts a proxy on a free loopback port forwarding to target and
// registers its shutdown with t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{
		target:  target,
		addr:    ln.Addr().String(),
		changed: make(chan struct{}),
		conns:   map[*proxyConn]struct{}{},
	}
	p.ln = ln
	p.wg.Add(1)
	go p.acceptLoop(ln)
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's "127.0.0.1:port"; point clients here.
func (p *Proxy) Addr() string { return p.addr }

// Bytes returns the bytes forwarded so far client->server (up) and
// server->client (down). A chunk is counted just before it is written to the
// peer, so anything a peer has received is already counted.
func (p *Proxy) Bytes() (up, down int64) { return p.up.Load(), p.down.Load() }

// Passthrough restores normal forwarding (and releases bytes held by Stall).
func (p *Proxy) Passthrough() { p.setMode(modePass, 0, 0) }

// Stall keeps forwarding client->server bytes (the write reaches Redis) but
// holds back server->client bytes until the mode changes: "stall after the
// write was sent".
func (p *Proxy) Stall() { p.setMode(modeStall, 0, 0) }

// Blackhole cuts the path both ways without closing anything, as a network
// partition does: client->server bytes are discarded (nothing reaches
// Redis) and server->client bytes are held, so every call times out. New
// connections are accepted and black-holed too. Leaving the mode aborts
// (RST) every connection that had bytes discarded, since its command
// stream has a gap; the others get their held replies, as after Stall.
func (p *Proxy) Blackhole() { p.setMode(modeBlackhole, 0, 0) }

// Delay adds d of latency before each server->client chunk is forwarded.
func (p *Proxy) Delay(d time.Duration) { p.setMode(modeDelay, d, 0) }

// ResetAfter closes connections with a TCP RST (SetLinger(0)) once n
// client->server bytes have been forwarded: new connections count from
// accept (connection set-up bytes such as HELLO/AUTH included), already open
// connections count from this call. Exactly n bytes reach Redis.
func (p *Proxy) ResetAfter(n int) {
	if n < 0 {
		n = 0
	}
	p.setMode(modeReset, 0, int64(n))
}

// Refuse stops accepting: the listener is closed, so new dials get
// "connection refused"; accepted connections keep forwarding (a dial still in
// the kernel's accept queue is reset). Any other mode
// re-opens the listener on the same address.
func (p *Proxy) Refuse() { p.setMode(modeRefuse, 0, 0) }

func (p *Proxy) setMode(m proxyMode, d time.Duration, n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.mode == modeBlackhole && m != modeBlackhole {
		for c := range p.conns {
			if c.dropped {
				c.abort()
			}
		}
	}
	p.mode, p.delay, p.resetN = m, d, n
	close(p.changed)
	p.changed = make(chan struct{})
	if m == modeReset {
		for c := range p.conns {
			c.budget.Store(n)
		}
	} else {
		for c := range p.conns {
			c.budget.Store(-1)
		}
	}
	switch {
	case m == modeRefuse && p.ln != nil:
		_ = p.ln.Close()
		p.ln = nil
	case m != modeRefuse && p.ln == nil:
		// Re-listen on the same port; retry briefly in case the kernel has
		// not released it yet.
		var ln net.Listener
		var err error
		for i := 0; i < 50; i++ {
			if ln, err = net.Listen("tcp", p.addr); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			// The port was taken by someone else: the proxy stays refusing,
			// which the test observes as dial failures.
			return
		}
		p.ln = ln
		p.wg.Add(1)
		go p.acceptLoop(ln)
	}
}

func (p *Proxy) state() (proxyMode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed
}

func (p *Proxy) acceptLoop(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // listener closed (Refuse or close)
		}
		p.handle(c.(*net.TCPConn))
	}
}

func (p *Proxy) handle(client *net.TCPConn) {
	srv, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		_ = client.SetLinger(0)
		_ = client.Close()
		return
	}
	pc := &proxyConn{client: client, server: srv.(*net.TCPConn)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pc.abort()
		return
	}
	if p.mode == modeReset {
		pc.budget.Store(p.resetN)
	} else {
		pc.budget.Store(-1)
	}
	p.conns[pc] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()

	if pc.budget.Load() == 0 {
		pc.abort()
	}
	go p.pumpUp(pc)
	go p.pumpDown(pc)
}

// abort closes both sides, the client side with RST.
func (pc *proxyConn) abort() {
	pc.once.Do(func() {
		_ = pc.client.SetLinger(0)
		_ = pc.client.Close()
		_ = pc.server.Close()
	})
}

func (p *Proxy) forget(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

func (p *Proxy) pumpUp(pc *proxyConn) {
	defer p.wg.Done()
	defer pc.abort()
	defer p.forget(pc)
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.client.Read(buf)
		if n > 0 && p.drop(pc) {
			n = 0
		}
		if n > 0 {
			chunk, reset := pc.take(buf[:n])
			if len(chunk) > 0 {
				// Count before writing so a peer that sees the bytes always
				// sees them counted.
				p.up.Add(int64(len(chunk)))
				if _, werr := pc.server.Write(chunk); werr != nil {
					return
				}
			}
			if reset {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = pc.server.CloseWrite()
			}
			return
		}
	}
}

// drop reports whether Blackhole discards a client->server chunk of pc,
// marking pc under the lock so a mode change either sees the mark or
// comes before the decision.
func (p *Proxy) drop(pc *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode != modeBlackhole {
		return false
	}
	pc.dropped = true
	return true
}

// take trims chunk to the remaining reset budget and reports whether the
// connection must be reset after forwarding it. The CAS loop keeps a
// concurrent ResetAfter from being overwritten by an in-flight chunk.
func (pc *proxyConn) take(chunk []byte) ([]byte, bool) {
	for {
		b := pc.budget.Load()
		if b < 0 {
			return chunk, false
		}
		n := min(int64(len(chunk)), b)
		if pc.budget.CompareAndSwap(b, b-n) {
			return chunk[:n], n == b
		}
	}
}

func (p *Proxy) pumpDown(pc *proxyConn) {
	defer p.wg.Done()
	defer pc.abort()
	buf := make([]byte, 32<<10)
	for {
		n, err := pc.server.Read(buf)
		if n > 0 {
			if !p.holdDown() {
				return
			}
			p.down.Add(int64(n))
			if _, werr := pc.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// holdDown applies Stall, Blackhole and Delay to one server->client chunk. It returns
// false when the proxy is shutting down.
func (p *Proxy) holdDown() bool {
	for {
		mode, d, changed := p.state()
		switch mode {
		case modeStall, modeBlackhole:
			<-changed
			continue
		case modeDelay:
			select {
			case <-time.After(d):
			case <-changed:
				continue // re-evaluate with the new mode
			}
		}
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		return !closed
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	// Wake anything held by Stall/Delay.
	p.mode = modePass
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, c := range conns {
		c.abort()
	}
	p.wg.Wait()
}
