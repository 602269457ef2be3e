package framework

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test network namespace's outgoing connections take ports below the
// host's, so that a host port forwarded into it at the same number is free
// there; the host's range is left as it was.
func TestTheNamespacesLocalPortsAreBelowTheHosts(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare")
	}
	host, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNetns(context.Background(), t.TempDir(), "192.0.2.250")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var inside []byte
	if err := n.inside(func() (err error) {
		inside, err = os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(string(inside)), " "); got != namespacePorts {
		t.Errorf("the namespace's local port range is %q, want %q", got, namespacePorts)
	}
	if after, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err != nil || string(after) != string(host) {
		t.Errorf("the host's local port range is %q (%v), want it as it was, %q", after, err, host)
	}
}
