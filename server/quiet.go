package server

import (
	"errors"
	"io"
	"net"
)

// quietListener's connections end without an answer when their read deadline
// (server.header_timeout) passes before the first byte of a first request: a
// client's spare connection (Go's transport dials ahead, browsers preconnect)
// is closed, not sent a timeout error for a request it never made, which Go's
// client logs as an "unsolicited response on idle HTTP channel". fasthttp does
// the same itself for a connection idle after a request; a request that
// started and stalled still gets its error.
type quietListener struct{ net.Listener }

func (l quietListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &quietConn{Conn: c}, nil
}

type quietConn struct {
	net.Conn
	got bool // a byte arrived: from then on, fasthttp's own handling
}

func (c *quietConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.got = true
	}
	var ne net.Error
	if err != nil && !c.got && errors.As(err, &ne) && ne.Timeout() {
		return n, io.EOF
	}
	return n, err
}

// ReadFrom keeps the connection's own (sendfile for a file body).
func (c *quietConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(c.Conn, r)
}
