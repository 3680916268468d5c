package runner

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediajobs/mediajobs/testenv"
)

// mp4Box of type typ in b, a whole file: its offset (the header's) and size,
// found by walking the boxes from the top through the containers named in path.
func findBox(t testing.TB, b []byte, path ...string) (int, int) {
	t.Helper()
	off, end := 0, len(b)
	for depth, typ := range path {
		for {
			if off+8 > end {
				t.Fatalf("no %v in the file", path)
			}
			size := int(binary.BigEndian.Uint32(b[off:]))
			if string(b[off+4:off+8]) == typ {
				if depth == len(path)-1 {
					return off, size
				}
				off, end = off+8, off+size
				if typ == "stsd" {
					off += 8
				}
				break
			}
			off += size
		}
	}
	panic("unreachable")
}

// Crafted MP4s: each is left to ffprobe, quickly, without a panic or an
// allocation of what a count or a size claims.
func TestProbeMP4Crafted(t *testing.T) {
	work := t.TempDir()
	out := filepath.Join(work, "outputs")
	makeFile(t, out, "-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=10", "-f", "lavfi", "-i", "sine=d=0.5",
		"-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-movflags", "+faststart", "base.mp4")
	orig, err := os.ReadFile(filepath.Join(out, "base.mp4"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := probeMP4(work, "outputs/base.mp4"); !ok {
		t.Fatal("the base file is not probed in process")
	}
	put32 := func(b []byte, at int, v uint32) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint32(b[at:], v)
		return b
	}
	moov, moovSize := findBox(t, orig, "moov")
	stsz, _ := findBox(t, orig, "moov", "trak", "mdia", "minf", "stbl", "stsz")
	stts, _ := findBox(t, orig, "moov", "trak", "mdia", "minf", "stbl", "stts")
	// An SPS with pic_order_cnt_type 1, whose cycle of frames mp4ff's parser
	// would allocate as its count says (up to 2^32): h264Size stops at the type.
	spsPOC1 := []byte{0x67, 0x42, 0xc0, 0x0a, 0xd0, 0x00, 0x00, 0x00, 0x01}
	if _, _, ok := h264Size(spsPOC1); ok {
		t.Error("an SPS with a picture order cycle was answered")
	}
	many := append([]byte{}, orig[:moov]...)
	for range mp4ProbeMaxBoxes {
		many = append(many, 0, 0, 0, 8, 'f', 'r', 'e', 'e')
	}
	many = append(many, orig[moov:]...)
	cases := map[string][]byte{
		"moov past the end":       put32(orig, moov, 0xfffffff0),
		"moov of size 0":          put32(orig, moov, 0),
		"moov of size 1, 64 bits": append(put32(orig, moov, 1), make([]byte, 8)...),
		"stsz of 2^32-1 samples":  put32(orig, stsz+16, 0xffffffff),
		"stts of 2^32-1 entries":  put32(orig, stts+12, 0xffffffff),
		"a box past its parent":   put32(orig, stsz, 0x7fffffff),
		"too many boxes":          many,
		"a moov too big to read": append(append(bytes.Clone(orig[:moov]),
			put32(orig[moov:moov+8], 0, mp4ProbeMaxMoov+16)...), make([]byte, mp4ProbeMaxMoov+8)...),
		"truncated": orig[:moov+moovSize/2],
	}
	for name, b := range cases {
		rel := "outputs/crafted.mp4"
		if err := os.WriteFile(filepath.Join(work, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if p, ok := probeMP4(work, rel); ok {
			t.Errorf("%s: probed in process: %s", name, showProbe(p))
		}
	}
}

// Mutated MP4s and MOVs: where the in-process probe answers, it answers as
// ffprobe does.
func TestProbeMP4Mutations(t *testing.T) {
	testenv.Binary(t, "ffprobe")
	work := t.TempDir()
	out := filepath.Join(work, "outputs")
	av := []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=10", "-f", "lavfi", "-i", "sine=d=0.5",
		"-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac"}
	bases := []struct {
		name string
		args []string
	}{
		{"f.mp4", append(av, "-movflags", "+faststart")},
		{"e.mp4", av},
		{"q.mov", av},
	}
	rng := rand.New(rand.NewSource(32))
	r := &Runner{WorkDir: work, Log: io.Discard, FFprobe: testenv.Binary(t, "ffprobe")}
	inProcess, n := 0, 0
	for _, base := range bases {
		makeFile(t, out, append(base.args, base.name)...)
		orig, err := os.ReadFile(filepath.Join(out, base.name))
		if err != nil {
			t.Fatal(err)
		}
		moov, size := findBox(t, orig, "moov")
		for i := range 100 {
			b := bytes.Clone(orig)
			switch i % 4 {
			case 0, 1: // flip a few bytes of the moov
				for range 1 + rng.Intn(3) {
					b[moov+rng.Intn(size)] ^= byte(1 + rng.Intn(255))
				}
			case 2:
				b = b[:rng.Intn(len(b))]
			case 3:
				at := moov + rng.Intn(size)
				b = append(b[:at:at], append(bytes.Repeat([]byte{byte(rng.Intn(256))}, 1+rng.Intn(8)), b[at:]...)...)
			}
			rel := fmt.Sprintf("outputs/m%d-%s", i, base.name)
			os.WriteFile(filepath.Join(work, rel), b, 0o644)
			n++
			p, ok := probeMP4(work, rel)
			if !ok {
				continue // ffprobe's answer, as before
			}
			inProcess++
			want, err := r.runFFprobe(context.Background(), rel)
			if err != nil || !sameProbe(p, want) {
				t.Errorf("%s: in process %s, ffprobe %s (%v)", rel, showProbe(p), showProbe(want), err)
				if d := os.Getenv("MP4_KEEP"); d != "" {
					os.WriteFile(filepath.Join(d, filepath.Base(rel)), b, 0o644)
				}
			}
		}
	}
	t.Logf("%d of %d mutated files probed in process, as ffprobe does", inProcess, n)
}

// The probe of a small MP4 (H.264 and AAC, 1.5 s), in process and by an
// ffprobe process (not sandboxed here: the sandbox adds its own cost).
// go test ./runner -run '^$' -bench ProbeMP4
func benchProbeMP4(b *testing.B, inProcess bool) {
	testenv.Binary(b, "ffprobe")
	work := b.TempDir()
	makeFile(b, filepath.Join(work, "outputs"), "-f", "lavfi", "-i", "testsrc=d=1.5:s=64x48:r=10", "-f", "lavfi", "-i", "sine=d=1.5",
		"-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "o.mp4")
	r := &Runner{WorkDir: work, Log: io.Discard, FFprobe: testenv.Binary(b, "ffprobe")}
	defer func(v bool) { inProcessProbe = v }(inProcessProbe)
	inProcessProbe = inProcess
	for b.Loop() {
		if p, err := r.probe(context.Background(), "outputs/o.mp4"); err != nil || len(p.Streams) != 2 || p.Streams[0].Width != 64 {
			b.Fatalf("probe: %s %v", showProbe(p), err)
		}
	}
}

func BenchmarkProbeMP4InProcess(b *testing.B) { benchProbeMP4(b, true) }
func BenchmarkProbeMP4FFprobe(b *testing.B)   { benchProbeMP4(b, false) }
