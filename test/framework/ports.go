package framework

import (
	"fmt"
	"net"
	"syscall"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Another program may take it before it is used: a child that binds it should
// be started with startChild, which starts it again on new ports when that
// happens, and a port that must not change should be held with a portSet.
func FreePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Closed only once all are picked, so that the n ports differ.
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portSet holds loopback ports for children that bind them with SO_REUSEPORT
// (etcd --socket-reuse-port, kube-apiserver --permit-port-sharing). Each port
// is held by a socket that is bound with SO_REUSEPORT but never listens: no
// other program can bind the port, and the kernel never hands it out as the
// local port of a connection, while the children (of the same user) bind it,
// exit and bind it again. The zero value is empty and ready to use.
type portSet struct {
	fds map[int]int // port -> socket
}

// hold holds port, or a fresh port when port is 0, and returns it. Holding a
// port already held does nothing.
func (s *portSet) hold(port int) (int, error) {
	if _, ok := s.fds[port]; ok {
		return port, nil
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	// No SO_REUSEADDR: with it, a listener that sets SO_REUSEADDR (as Go's
	// do) could bind the port alongside this socket.
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, soReusePort, 1); err != nil {
		_ = syscall.Close(fd)
		return 0, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return 0, fmt.Errorf("holding port 127.0.0.1:%d: %w", port, err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return 0, err
	}
	port = sa.(*syscall.SockaddrInet4).Port
	if s.fds == nil {
		s.fds = map[int]int{}
	}
	s.fds[port] = fd
	return port, nil
}

// release lets go of every port held.
func (s *portSet) release() {
	for port, fd := range s.fds {
		_ = syscall.Close(fd)
		delete(s.fds, port)
	}
}

// soReusePort is SO_REUSEPORT on Linux, which the syscall package does not name.
const soReusePort = 0xf
