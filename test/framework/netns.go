package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace the framework creates for a managed cluster
// whose kubelets need real addresses: the kubelet refuses a loopback node IP,
// and the API server's node proxy refuses any address that is not global
// unicast. The namespace holds only lo and one ifb device with addresses from
// TEST-NET-1 (192.0.2.0/24) and has no route out: nothing sent to those
// addresses ever leaves it.
//
// No /run/netns entry is made. A holder process (unshare --net sleep) keeps
// the namespace alive; every process the framework starts in it, the holder
// included, dies with the test process (Pdeathsig), and the kernel deletes the
// namespace with its last process. A killed test therefore leaves nothing
// behind.
//
// Processes join it with nsenter (not `ip netns exec`, which remounts /sys
// and leaves the kubelet without cgroups); the test process reaches it
// through DialContext, which opens each connection from an OS thread that
// joined the namespace, and Forward, which serves a loopback port of the
// host with it.
type Netns struct {
	holder *process
	path   string // /proc/<holder>/ns/net

	mu        sync.Mutex
	listeners []net.Listener
}

// Device is the name of the namespace's ifb device.
const netnsDevice = "carousel0"

// NewNetns creates a namespace whose ifb device holds addresses (each in
// TEST-NET-1, a /24 is added to the device). logDir receives the holder's log.
func NewNetns(ctx context.Context, logDir string, addresses ...string) (*Netns, error) {
	for _, a := range addresses {
		if err := inTestNet(a); err != nil {
			return nil, err
		}
	}
	holder, err := startProcess("netns holder", "unshare", filepath.Join(logDir, "netns.log"), "--net", "--", "sleep", "infinity")
	if err != nil {
		return nil, err
	}
	n := &Netns{holder: holder, path: "/proc/" + strconv.Itoa(holder.cmd.Process.Pid) + "/ns/net"}
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		n.Close()
		return nil, err
	}
	if err := await(ctx, "the network namespace", 10*time.Millisecond, 10*time.Second, func(context.Context) (bool, error) {
		ns, err := os.Readlink(n.path)
		return err == nil && ns != own, nil
	}, holder); err != nil {
		n.Close()
		return nil, err
	}
	steps := [][]string{{"link", "set", "lo", "up"}, {"link", "add", netnsDevice, "type", "ifb"}}
	for _, a := range addresses {
		steps = append(steps, []string{"addr", "add", a + "/24", "dev", netnsDevice})
	}
	steps = append(steps, []string{"link", "set", netnsDevice, "up"})
	for _, step := range steps {
		if err := n.ip(ctx, step...); err != nil {
			n.Close()
			return nil, err
		}
	}
	// The ports of the namespace's outgoing connections are below the host's
	// (from 32768): a host port that a server is forwarded to inside at the
	// same number (the management API server, Cluster API's webhooks) is
	// never one of them. The setting is the namespace's, gone with it.
	if err := n.inside(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte(namespacePorts), 0o644)
	}); err != nil {
		n.Close()
		return nil, fmt.Errorf("setting the test network namespace's local port range: %w", err)
	}
	return n, nil
}

// namespacePorts is the local port range of the test network namespace.
const namespacePorts = "20000 29999"

// AddAddress gives the namespace's device one more address of TEST-NET-1,
// for a node that joins later.
func (n *Netns) AddAddress(ctx context.Context, address string) error {
	if err := inTestNet(address); err != nil {
		return err
	}
	return n.ip(ctx, "addr", "add", address+"/24", "dev", netnsDevice)
}

// inTestNet refuses an address outside TEST-NET-1: nothing sent to one of
// those may leave the namespace.
func inTestNet(address string) error {
	_, testNet, _ := net.ParseCIDR("192.0.2.0/24")
	if ip := net.ParseIP(address); ip == nil || !testNet.Contains(ip) {
		return fmt.Errorf("netns address %q is not in TEST-NET-1 (192.0.2.0/24)", address)
	}
	return nil
}

// ip runs an ip command in the namespace.
func (n *Netns) ip(ctx context.Context, args ...string) error {
	if out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.path, "--", "ip"}, args...)...).CombinedOutput(); err != nil { //nolint:gosec // fixed ip commands
		return fmt.Errorf("ip %s in the test network namespace: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Path is the namespace's file, for nsenter --net.
func (n *Netns) Path() string { return n.path }

// PID is the holder's process ID.
func (n *Netns) PID() int { return n.holder.cmd.Process.Pid }

// Wrap returns the command line that runs binary with args inside the
// namespace.
func (n *Netns) Wrap(binary string, args ...string) (string, []string) {
	return "nsenter", append([]string{"--net=" + n.path, "--", binary}, args...)
}

// DialContext opens a connection from inside the namespace.
func (n *Netns) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := n.inside(func() (err error) {
		conn, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, address)
		return err
	})
	return conn, err
}

// Listen opens a listener inside the namespace; Close closes it.
func (n *Netns) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := n.inside(func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	if err == nil {
		n.mu.Lock()
		n.listeners = append(n.listeners, ln)
		n.mu.Unlock()
	}
	return ln, err
}

// inside runs f on an OS thread that joined the namespace: the sockets it
// opens belong to the namespace, whichever thread uses them later.
func (n *Netns) inside(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored, err := n.runInside(f)
		// A thread that could not return to the test's namespace must not
		// run anything else: a locked goroutine that ends takes it along.
		if restored {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// runInside runs f on the calling (locked) thread after it joined the
// namespace, and returns whether the thread is back in its own namespace.
func (n *Netns) runInside(f func() error) (bool, error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return true, err
	}
	defer func() { _ = own.Close() }()
	target, err := os.Open(n.path)
	if err != nil {
		return true, err
	}
	defer func() { _ = target.Close() }()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("joining the test network namespace: %w", err)
	}
	err = f()
	restored := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil
	return restored, err
}

// Forward serves ln, a listener of the test's namespace, by copying each
// connection to target inside the namespace, until Close. A connection target
// refuses is closed.
func (n *Netns) Forward(ln net.Listener, target string) {
	n.mu.Lock()
	n.listeners = append(n.listeners, ln)
	n.mu.Unlock()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go n.pipe(conn, target)
		}
	}()
}

// ForwardOut serves ln, a listener inside the namespace, by copying each
// connection to the address target returns then, in the test's namespace,
// until Close: a server of the host (the manager's webhook, which moves on
// each start) that processes in the namespace reach at ln's address.
func (n *Netns) ForwardOut(ln net.Listener, target func() string) {
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				upstream, err := (&net.Dialer{Timeout: 10 * time.Second}).Dial("tcp", target())
				if err != nil {
					return
				}
				defer func() { _ = upstream.Close() }()
				pipe(conn, upstream)
			}()
		}
	}()
}

func (n *Netns) pipe(conn net.Conn, target string) {
	defer func() { _ = conn.Close() }()
	upstream, err := n.DialContext(context.Background(), "tcp", target)
	if err != nil {
		return
	}
	defer func() { _ = upstream.Close() }()
	pipe(conn, upstream)
}

// Close stops forwarding and stops the holder; the kernel deletes the
// namespace once the processes started in it have exited too.
func (n *Netns) Close() {
	n.mu.Lock()
	for _, ln := range n.listeners {
		_ = ln.Close()
	}
	n.listeners = nil
	n.mu.Unlock()
	stop(n.holder)
}
