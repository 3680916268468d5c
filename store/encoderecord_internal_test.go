package store

import (
	"encoding/json"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// A record counts its own size, the count included, plus what is stored beside
// it, and is what encoding/json writes for the job; a user's metadata key named
// record_bytes is no field of the job's, and sizes across a power of ten settle.
func TestEncodeRecordCountsItself(t *testing.T) {
	for _, c := range []struct {
		name   string
		meta   map[string]string
		pad    int
		beside int64
	}{
		{"plain", nil, 0, 0},
		{"beside", nil, 0, 31_000},
		{"metadata key", map[string]string{"record_bytes": "12345", "x": `"record_bytes":10000`}, 0, 0},
		{"small", nil, -1, 0},
		{"near 100 KB", nil, 99_000, 0},
		{"over 100 KB", nil, 99_950, 0},
	} {
		j := &mj.Job{ID: "0b0f3d1e-6f0e-4c5e-9f54-3a2b1c0d9e8f", AccountID: "acct", Machine: "cpu", Status: mj.StatusQueued, Metadata: c.meta}
		if c.pad > 0 {
			j.FFmpegCommands = []string{strings.Repeat("a", c.pad)}
		}
		if c.pad < 0 {
			j = &mj.Job{ID: "x"}
		}
		for beside := c.beside; beside < c.beside+3; beside++ {
			b, err := encodeRecord(j, beside)
			if err != nil {
				t.Fatal(c.name, err)
			}
			if j.RecordBytes != int64(len(b))+beside {
				t.Errorf("%s: record_bytes %d, want %d (%d bytes + %d beside)", c.name, j.RecordBytes, int64(len(b))+beside, len(b), beside)
			}
			want, _ := json.Marshal(j)
			if string(b) != string(want) {
				t.Errorf("%s: encoded\n%s\nwant\n%s", c.name, b, want)
			}
			var back mj.Job
			if err := json.Unmarshal(b, &back); err != nil || back.RecordBytes != j.RecordBytes || back.Metadata["record_bytes"] != c.meta["record_bytes"] {
				t.Errorf("%s: decoded %d, %v, %v", c.name, back.RecordBytes, back.Metadata, err)
			}
		}
	}
}
