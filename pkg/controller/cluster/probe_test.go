package cluster

import (
	"errors"
	"net"
	"net/url"
	"syscall"
	"testing"
)

// A check that keeps failing on a connection reset gives the same condition
// each time, whatever local port each attempt used: its message names the
// API server, not the connection's local address.
func TestAnUnreachableConditionLeavesOutTheLocalAddress(t *testing.T) {
	reset := func(port int) error {
		return &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/version", Err: &net.OpError{Op: "read", Net: "tcp",
			Source: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 11), Port: port}, Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 6443},
			Err: syscall.ECONNRESET}}
	}
	first, second := unreachable("", reset(54321)).Message, unreachable("", reset(54322)).Message
	if first != second {
		t.Errorf("the messages differ:\n%s\n%s", first, second)
	}
	if want := `Get "https://192.0.2.1:6443/version": read tcp 192.0.2.1:6443: connection reset by peer`; first != want {
		t.Errorf("message %q, want %q", first, want)
	}
	if got := unreachable("not yet: ", errors.New("x509: certificate signed by unknown authority")).Message; got != "not yet: x509: certificate signed by unknown authority" {
		t.Errorf("message %q: an error without a connection is kept as it is", got)
	}
}
