//go:build unix

package gateway

import (
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// watchClient tells when the client of conn goes away (closes or resets the
// connection) while its request is handled: fasthttp cancels nothing then. It
// calls gone at once when it does, and the function it returns stops the
// watch and says whether the client went. It peeks at the socket, so it never
// takes a byte of what the client sends; a client that sends something (the
// next request) is taken to be there. A connection that is not a plain socket
// (TLS, a test's in-memory one) is not watched: the client counts as there.
func watchClient(conn net.Conn, gone func()) (stop func() bool) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() bool { return false }
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() bool { return false }
	}
	var left atomic.Bool
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		var b [1]byte
		raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EAGAIN || err == syscall.EINTR:
				return false // nothing yet: wait until the socket is readable
			case n <= 0:
				left.Store(true) // end of stream, or reset
			}
			return true
		})
		if left.Load() {
			gone()
		}
	}()
	return func() bool {
		conn.SetReadDeadline(time.Now()) // ends raw.Read's wait
		<-ended
		// fasthttp sets its own deadline before it reads the next request.
		conn.SetReadDeadline(time.Time{})
		return left.Load()
	}
}
