package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
)

// Chunked holds the defaults and bounds of chunked encoding (docs/chunked.md):
// a job's "parallel" may set chunk_seconds and max_workers; max_chunks bounds
// how many chunks one source is cut into (the plan makes chunks longer past
// it), and so how many jobs a chunked job makes.
type Chunked struct {
	ChunkSeconds int `hcl:"chunk_seconds,optional"`
	MaxWorkers   int `hcl:"max_workers,optional"`
	MaxChunks    int `hcl:"max_chunks,optional"`

	SecondsRange hcl.Range `hcl:"chunk_seconds,attr_range"`
	WorkersRange hcl.Range `hcl:"max_workers,attr_range"`
	ChunksRange  hcl.Range `hcl:"max_chunks,attr_range"`
}

// Defaults of chunked encoding.
const (
	DefaultChunkSeconds = 60
	DefaultChunkWorkers = 4
	DefaultMaxChunks    = 64
	// MaxChunksLimit is the most max_chunks may say: a chunked job's jobs (a
	// chunk each, and four more) are one pipeline's, planned in one etcd record.
	MaxChunksLimit = MaxPipelineJobs - 4
)

func (c *Chunked) defaults() {
	if c.ChunkSeconds == 0 && c.SecondsRange.Filename == "" {
		c.ChunkSeconds = DefaultChunkSeconds
	}
	if c.MaxWorkers == 0 && c.WorkersRange.Filename == "" {
		c.MaxWorkers = DefaultChunkWorkers
	}
	if c.MaxChunks == 0 && c.ChunksRange.Filename == "" {
		c.MaxChunks = DefaultMaxChunks
	}
}

// check reports what is wrong with the chunked block.
func (c *Chunked) check(ck *checker) {
	if c.ChunkSeconds < 1 {
		ck.bad(c.SecondsRange, "Invalid chunk_seconds", fmt.Sprintf("chunk_seconds = %d: a chunk lasts at least 1 second (default %d).", c.ChunkSeconds, DefaultChunkSeconds))
	}
	if c.MaxWorkers < 1 {
		ck.bad(c.WorkersRange, "Invalid max_workers", fmt.Sprintf("max_workers = %d: a chunked job encodes at least 1 chunk at a time (default %d).", c.MaxWorkers, DefaultChunkWorkers))
	}
	if c.MaxChunks < 1 || c.MaxChunks > MaxChunksLimit {
		ck.bad(c.ChunksRange, "Invalid max_chunks", fmt.Sprintf("max_chunks = %d must be between 1 and %d (default %d): a chunked job's jobs are planned in one etcd record.", c.MaxChunks, MaxChunksLimit, DefaultMaxChunks))
	}
}
