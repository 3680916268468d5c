package config

import (
	"strings"
	"testing"
)

// The limits of storage, event streams and input bytes: their defaults, a
// value set, and a negative one refused.
func TestLimitsOfStorageStreamsInputs(t *testing.T) {
	c, err := Parse([]byte(""), "empty.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits; *l.MaxStorageBytes != 10<<30 || *l.MaxEventStreams != 16 || *l.MaxInputBytes != 0 {
		t.Fatalf("defaults: storage %d, streams %d, inputs %d", *l.MaxStorageBytes, *l.MaxEventStreams, *l.MaxInputBytes)
	}
	c, err = Parse([]byte("limits {\n  max_storage_bytes = 0\n  max_event_streams = 3\n  max_input_bytes = 1000\n}\n"), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits; *l.MaxStorageBytes != 0 || *l.MaxEventStreams != 3 || *l.MaxInputBytes != 1000 {
		t.Fatalf("set: storage %d, streams %d, inputs %d", *l.MaxStorageBytes, *l.MaxEventStreams, *l.MaxInputBytes)
	}
	for _, name := range []string{"max_storage_bytes", "max_event_streams", "max_input_bytes"} {
		_, err := Parse([]byte("limits {\n  "+name+" = -1\n}\n"), "bad.hcl")
		if err == nil || !strings.Contains(err.Error(), "Invalid "+name) {
			t.Errorf("%s = -1: %v", name, err)
		}
	}
}
