package framework

import (
	"bufio"
	"math/rand/v2"
	"net"
	"testing"
)

// nameServer answers every connection with name and a newline.
func nameServer(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte(name + "\n"))
			_ = conn.Close()
		}
	}()
	return ln.Addr().String()
}

// TestLoadBalancer checks that connections go only to the backends in
// service, spread over all of them, and are closed when none is.
func TestLoadBalancer(t *testing.T) {
	lb := &loadBalancer{dial: (&net.Dialer{}).DialContext, random: rand.New(rand.NewPCG(1, 2))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go lb.serve(ln)
	a, b := nameServer(t, "a"), nameServer(t, "b")
	var odd map[string]int // of the connections made second, fourth, ...
	answers := func(n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		odd = map[string]int{}
		for i := range n {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(conn).ReadString('\n')
			_ = conn.Close()
			got[line]++
			if i%2 == 1 {
				odd[line]++
			}
		}
		return got
	}

	if got := answers(2); got[""] != 2 {
		t.Errorf("with no backend in service, got %v, want every connection closed", got)
	}
	lb.setServing(a, true)
	lb.setServing(b, true)
	if got := answers(20); got["a\n"] == 0 || got["b\n"] == 0 || got["a\n"]+got["b\n"] != 20 {
		t.Errorf("with a and b in service, got %v, want both", got)
	}
	if odd["a\n"] == 0 || odd["b\n"] == 0 {
		t.Errorf("every second connection went to %v: two clients that reconnect in turn would each get one backend", odd)
	}
	lb.setServing(a, false)
	if got := answers(3); got["b\n"] != 3 {
		t.Errorf("with a out of service, got %v, want b only", got)
	}
	lb.setServing(b, true) // twice in service is once
	lb.setServing(a, true)
	if got := answers(20); got["a\n"] == 0 || got["b\n"] == 0 || got["a\n"]+got["b\n"] != 20 {
		t.Errorf("with both back in service, got %v, want both", got)
	}
}
