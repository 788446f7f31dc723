package testenv

import "net"

// FreePort is a TCP port on 127.0.0.1 that nothing listens on now. A
// server started on it in the next moment may find it taken by another
// process: the callers (pgtest, redistest) try again on another.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
