package config

import (
	"strings"
	"testing"
)

// The chunked block has defaults; values set are kept, and ones out of range
// are refused naming their line.
func TestChunkedBlock(t *testing.T) {
	c, err := Parse([]byte(""), "t.hcl")
	if err != nil || c.Chunked.ChunkSeconds != DefaultChunkSeconds || c.Chunked.MaxWorkers != DefaultChunkWorkers || c.Chunked.MaxChunks != DefaultMaxChunks {
		t.Fatalf("defaults: %+v, %v", c.Chunked, err)
	}
	c, err = Parse([]byte("chunked {\n  chunk_seconds = 10\n  max_workers = 2\n}\n"), "t.hcl")
	if err != nil || c.Chunked.ChunkSeconds != 10 || c.Chunked.MaxWorkers != 2 || c.Chunked.MaxChunks != DefaultMaxChunks {
		t.Fatalf("set: %+v, %v", c.Chunked, err)
	}
	for _, src := range []string{"chunked {\n  chunk_seconds = 0\n}\n", "chunked {\n  max_workers = -1\n}\n", "chunked {\n  max_chunks = 100000\n}\n"} {
		if _, err := Parse([]byte(src), "t.hcl"); err == nil || !strings.Contains(err.Error(), "t.hcl:2") {
			t.Errorf("%q: %v", src, err)
		}
	}
	c = Default()
	c.Chunked = nil
	if err := c.Finish(); err != nil || c.Chunked.MaxChunks != DefaultMaxChunks {
		t.Fatalf("Finish without the block: %+v, %v", c.Chunked, err)
	}
}
