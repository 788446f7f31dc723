package redistest

import (
	"strings"
	"testing"
)

// TestServer: a server answers, forgets everything across Halt and
// Restart on the same port, and is gone after Stop.
func TestServer(t *testing.T) {
	s := Own(t)
	if out, err := s.Do("SET", "k", "v"); err != nil || out != "OK" {
		t.Fatalf("SET: %q, %v", out, err)
	}
	if out, err := s.Do("GET", "k"); err != nil || out != "v" {
		t.Fatalf("GET: %q, %v", out, err)
	}
	if out, err := s.Do("CONFIG", "GET", "bind"); err != nil || !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("bind: %q, %v; want loopback only", out, err)
	}
	s.Halt()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Halt")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Do("GET", "k"); err != nil || out != "" {
		t.Fatalf("GET after a restart: %q, %v; want nothing kept", out, err)
	}
	port := s.Port
	s.Stop()
	if _, err := (&Server{Port: port}).Do("PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
}

// TestCluster: three masters, every slot served, a key answered by the
// node that owns its slot and redirected by the others.
func TestCluster(t *testing.T) {
	c := OwnCluster(t)
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	moved := 0
	for _, n := range c.Nodes {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_size:3") {
			t.Fatalf("%s: %q, %v; want three masters", n.Addr(), info, err)
		}
		if _, err := n.Do("SET", "{o}k", "v"); err != nil {
			if !strings.HasPrefix(err.Error(), "MOVED ") {
				t.Fatalf("%s: SET: %v", n.Addr(), err)
			}
			moved++
		}
	}
	if moved != 2 {
		t.Fatalf("%d nodes redirected a key; want the two that do not own its slot", moved)
	}
}
