package framework

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
)

// loadBalancer plays the TCP load balancer in front of the API server
// replicas (or the tunnel servers), as a Service of type LoadBalancer does:
// it sends each new connection to a backend in service picked at random, as
// kube-proxy does. (In rotation, two clients that reconnect in step, as the
// tunnel agents do until each has reached every server, would each get the
// same backend every time.) A backend
// taken out of service gets no new connection; those it has stay open until
// either side closes them, as on a real one, where the API server's graceful
// shutdown ends them (GOAWAY) and its clients reconnect.
type loadBalancer struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// random picks the backend; nil uses math/rand/v2's global source.
	random *rand.Rand

	mu      sync.Mutex
	serving []string
}

// serve accepts connections on ln until it is closed.
func (lb *loadBalancer) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go lb.proxy(conn)
	}
}

// setServing puts address in service or takes it out.
func (lb *loadBalancer) setServing(address string, serving bool) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	lb.serving = slices.DeleteFunc(lb.serving, func(a string) bool { return a == address })
	if serving {
		lb.serving = append(lb.serving, address)
	}
}

// pick returns a backend in service, or "" if none is.
func (lb *loadBalancer) pick() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	switch {
	case len(lb.serving) == 0:
		return ""
	case lb.random != nil:
		return lb.serving[lb.random.IntN(len(lb.serving))]
	}
	return lb.serving[rand.IntN(len(lb.serving))]
}

// proxy copies conn to a backend in service and back; with none in service,
// or when the backend refuses, it closes conn.
func (lb *loadBalancer) proxy(conn net.Conn) {
	defer func() { _ = conn.Close() }()
	backend := lb.pick()
	if backend == "" {
		return
	}
	upstream, err := lb.dial(context.Background(), "tcp", backend)
	if err != nil {
		return
	}
	defer func() { _ = upstream.Close() }()
	pipe(conn, upstream)
}

// pipe copies a to b and b to a until both directions are done.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go copyHalf(a, b)
	go copyHalf(b, a)
	<-done
	<-done
}
