package runner

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/jpeg"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// makeFile runs ffmpeg with args, the last of them the file it writes under dir.
func makeFile(t testing.TB, dir string, args ...string) {
	t.Helper()
	out := filepath.Join(dir, args[len(args)-1])
	os.MkdirAll(filepath.Dir(out), 0o755)
	args = append(append([]string{"-v", "error", "-y"}, args[:len(args)-1]...), out)
	if b, err := exec.Command(testenv.Binary(t, "ffmpeg"), args...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg %s: %v %s", strings.Join(args, " "), err, b)
	}
}

func sameProbe(a, b *mj.Probe) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.DurationSeconds == nil) != (b.DurationSeconds == nil) ||
		(a.DurationSeconds != nil && *a.DurationSeconds != *b.DurationSeconds) ||
		a.Format != b.Format || len(a.Streams) != len(b.Streams) {
		return false
	}
	for i := range a.Streams {
		if a.Streams[i] != b.Streams[i] {
			return false
		}
	}
	return true
}

func showProbe(p *mj.Probe) string {
	if p == nil {
		return "<nil>"
	}
	d := "none"
	if p.DurationSeconds != nil {
		d = fmt.Sprint(*p.DurationSeconds)
	}
	return fmt.Sprintf("{%s duration %s streams %+v}", p.Format, d, p.Streams)
}

// checkProbe: the runner's probe of rel equals ffprobe's, field by field, and
// was made in this process when inProcess.
func checkProbe(t *testing.T, r *Runner, rel string, inProcess bool) {
	t.Helper()
	_, img := probeImage(r.WorkDir, rel)
	_, mp4 := probeMP4(r.WorkDir, rel)
	if ok := img || mp4; ok != inProcess {
		t.Errorf("%s: probed in process %v, want %v", rel, ok, inProcess)
	}
	got, gerr := r.probe(context.Background(), rel)
	want, werr := r.runFFprobe(context.Background(), rel)
	if (gerr == nil) != (werr == nil) || !sameProbe(got, want) {
		t.Errorf("%s: probe %s (%v), ffprobe %s (%v)", rel, showProbe(got), gerr, showProbe(want), werr)
	}
}

// TestProbeMatchesFFprobe: over a corpus of containers made by ffmpeg, the
// outputs metadata is ffprobe's, whether the probe ran in process (PNG, JPEG and
// WebP stills) or not.
func TestProbeMatchesFFprobe(t *testing.T) {
	testenv.Binary(t, "ffprobe")
	work := t.TempDir()
	out := filepath.Join(work, "outputs")
	av := []string{"-f", "lavfi", "-i", "testsrc=d=1.5:s=64x48:r=10", "-f", "lavfi", "-i", "sine=d=1.5"}
	still := func(size, pixFmt string, more ...string) []string {
		return append([]string{"-f", "lavfi", "-i", "testsrc=s=" + size, "-frames:v", "1", "-pix_fmt", pixFmt}, more...)
	}
	a := []string{"-f", "lavfi", "-i", "sine=d=0.5"}
	corpus := []struct {
		name      string
		args      []string // ffmpeg's, before the output; nil: made by another row
		inProcess bool
	}{
		{"o.mp4", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac"), true},
		{"o.mov", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac"), true},
		// MP4 and MOV (mp4probe.go): in process for H.264 and AAC-LC.
		{"fast.mp4", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-movflags", "+faststart"), true},
		{"crop.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=0.7:s=66x50:r=24", "-c:v", "libx264", "-preset", "ultrafast"}, true},
		{"hi.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=30", "-c:v", "libx264", "-profile:v", "high444", "-pix_fmt", "yuv444p"}, true},
		{"ten.mov", []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=30", "-c:v", "libx264", "-pix_fmt", "yuv420p10le"}, true},
		{"gray.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=30", "-c:v", "libx264", "-pix_fmt", "gray"}, true},
		{"mono22k.mp4", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-ar", "22050", "-ac", "1"), true},
		{"a.m4a", []string{"-f", "lavfi", "-i", "sine=d=0.7", "-c:a", "aac"}, true},
		{"a.mov", []string{"-f", "lavfi", "-i", "sine=d=0.7:sample_rate=48000", "-c:a", "aac", "-ac", "2"}, true},
		{"ts30000.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=1.001:s=64x48:r=30000/1001", "-c:v", "libx264", "-video_track_timescale", "30000"}, true},
		{"long.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=12.345:s=32x32:r=5", "-f", "lavfi", "-i", "sine=d=12.3:sample_rate=44100", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-b:a", "16k"}, true},
		// Left to ffprobe.
		{"six.mp4", []string{"-f", "lavfi", "-i", "sine=d=0.5", "-c:a", "aac", "-ac", "6"}, false},
		{"frag.mp4", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-movflags", "frag_keyframe+empty_moov"), false},
		{"hevc.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=10", "-c:v", "libx265", "-x265-params", "log-level=none"}, false},
		{"mpeg4.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=10", "-c:v", "mpeg4"}, false},
		{"opus.mp4", []string{"-f", "lavfi", "-i", "sine=d=0.5", "-c:a", "libopus"}, false},
		{"pcm.mov", []string{"-f", "lavfi", "-i", "sine=d=0.5", "-c:a", "pcm_s16le"}, false},
		{"cover.mp4", []string{"-f", "lavfi", "-i", "sine=d=0.5", "-f", "lavfi", "-i", "color=s=16x16:d=0.1", "-map", "0", "-map", "1", "-frames:v", "1",
			"-c:a", "aac", "-c:v", "png", "-disposition:v", "attached_pic"}, false},
		{"interlaced.mp4", []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=64x48:r=25", "-c:v", "libx264", "-flags", "+ildct+ilme", "-x264opts", "interlaced=1"}, false},
		{"o.mkv", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "flac"), false},
		{"o.webm", append(av, "-c:v", "libvpx", "-deadline", "realtime", "-c:a", "libopus"), false},
		{"o.ts", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac"), false},
		{"hls/p.m3u8", append(av, "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-f", "hls", "-hls_time", "1",
			"-hls_segment_filename", filepath.Join(out, "hls/seg_%d.ts")), false},
		{"hls/seg_0.ts", nil, false},
		{"o.mp3", append(a, "-c:a", "libmp3lame"), false},
		{"o.aac", append(a, "-c:a", "aac", "-f", "adts"), false},
		{"o.wav", a, false},
		{"o.flac", a, false},
		// The trivial job.
		{"o.png", []string{"-f", "lavfi", "-i", "color=c=black:s=16x16:d=0.1", "-frames:v", "1"}, true},
		{"rgb48.png", still("33x17", "rgb48be"), true},
		{"gray.png", still("33x17", "gray"), true},
		{"gray16.png", still("33x17", "gray16be"), true},
		{"rgba.png", still("33x17", "rgba"), true},
		{"ya8.png", still("33x17", "ya8"), true},
		{"pal.png", still("33x17", "pal8"), true},
		{"mono.png", still("33x17", "monob"), true},
		{"big.png", still("640x360", "rgb24"), true},
		{"anim.png", []string{"-f", "lavfi", "-i", "testsrc=d=0.3:s=32x24:r=10", "-f", "apng"}, false}, // apng
		{"small.jpg", still("32x24", "yuvj420p"), true},                                                // jpeg_pipe
		{"j444.jpg", still("30x22", "yuvj444p"), true},
		{"gray.jpg", still("30x22", "gray"), true},
		{"j422.jpeg", still("30x22", "yuvj422p"), true},
		{"big.jpg", still("640x360", "yuvj420p"), true}, // image2, duration 0.04
		{"BIG.JPEG", still("640x360", "yuvj420p", "-f", "mjpeg"), true},
		{"big.bin", still("640x360", "yuvj420p", "-f", "mjpeg"), false}, // jpeg_pipe after a longer probe
		{"thumb", still("32x24", "yuvj420p", "-f", "mjpeg"), true},
		{"o.gif", []string{"-f", "lavfi", "-i", "testsrc=d=0.5:s=32x24:r=10"}, false},
		{"still.gif", still("32x24", "rgb8"), false},
		{"lossy.webp", still("35x21", "yuv420p"), true},
		{"lossless.webp", still("35x21", "bgra", "-lossless", "1"), true},
		{"alpha.webp", still("35x21", "yuva420p"), true},
		{"big.webp", still("640x360", "yuv420p"), true},
		{"anim.webp", []string{"-f", "lavfi", "-i", "testsrc=d=0.3:s=32x24:r=10", "-loop", "0"}, false},
		{"o.bmp", still("32x24", "bgr24"), false},
	}
	for _, c := range corpus {
		if c.args != nil {
			makeFile(t, out, append(c.args, c.name)...)
		}
	}
	r := &Runner{WorkDir: work, Log: io.Discard, FFprobe: testenv.Binary(t, "ffprobe")}
	for _, c := range corpus {
		checkProbe(t, r, "outputs/"+c.name, c.inProcess)
	}
	// The corpus covers what it means to: both sides of the probe window.
	if fi, _ := os.Stat(filepath.Join(out, "small.jpg")); fi.Size() > probeWindow {
		t.Fatalf("small.jpg is %d bytes: not read by jpeg_pipe", fi.Size())
	}
	if p, _ := r.probe(context.Background(), "outputs/big.jpg"); p == nil || p.Format != "image2" {
		t.Fatalf("big.jpg: %s, want ffprobe's image2", showProbe(p))
	}
}

// pngWithSize is b, a PNG, with the size its IHDR says changed (and its CRC kept
// right).
func pngWithSize(b []byte, w, h uint32) []byte {
	b = bytes.Clone(b)
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// TestProbeImageMalformed: a broken or hostile image output is probed by
// ffprobe, as before: the runner neither crashes, nor reads outside the job, nor
// says anything ffprobe would not.
func TestProbeImageMalformed(t *testing.T) {
	testenv.Binary(t, "ffprobe")
	src := t.TempDir()
	makeFile(t, src, "-f", "lavfi", "-i", "testsrc=s=320x180", "-frames:v", "1", "i.png")
	makeFile(t, src, "-f", "lavfi", "-i", "testsrc=s=320x180", "-frames:v", "1", "i.jpg")
	makeFile(t, src, "-f", "lavfi", "-i", "testsrc=s=320x180", "-frames:v", "1", "i.webp")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pngB, jpgB, webpB := read("i.png"), read("i.jpg"), read("i.webp")
	idat := bytes.Index(pngB, []byte("IDAT"))
	badZlib := bytes.Clone(pngB)
	for i := idat + 8; i < idat+40; i++ {
		badZlib[i] ^= 0x55
	}
	dht := bytes.Index(jpgB, []byte{0xff, 0xc4})
	badDHT := bytes.Clone(jpgB)
	binary.BigEndian.PutUint16(badDHT[dht+2:], 3) // a table too short for its counts
	files := map[string][]byte{
		"trunc.png":     pngB[:len(pngB)/2],
		"header.png":    pngB[:33], // signature and IHDR
		"trailing.png":  append(bytes.Clone(pngB), "not a png"...),
		"two.png":       append(bytes.Clone(pngB), pngB...),
		"absurd.png":    pngWithSize(pngB, 100000, 100000),
		"toobig.png":    pngWithSize(pngB, 17000, 16000), // past av_image_check_size
		"large.png":     pngWithSize(pngB, 4096, 4096),   // past imageProbeMaxPixels
		"zero.png":      pngWithSize(pngB, 0, 180),
		"badzlib.png":   badZlib,
		"trunc.jpg":     jpgB[:len(jpgB)/2],
		"noeoi.jpg":     jpgB[:len(jpgB)-2],
		"baddht.jpg":    badDHT,
		"trunc.webp":    webpB[:len(webpB)/2],
		"trailing.webp": append(bytes.Clone(webpB), 0, 0, 0, 0),
		"magic.png":     pngMagic,
		"soi.jpg":       {0xff, 0xd8},
		"riff.webp":     []byte("RIFF\x04\x00\x00\x00WEBP"),
	}
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, "outputs"), 0o755)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(work, "outputs", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runner{WorkDir: work, Log: io.Discard, FFprobe: testenv.Binary(t, "ffprobe")}
	for name := range files {
		checkProbe(t, r, "outputs/"+name, false)
	}

	// Out of the job: a link to an image outside, a directory that is a link, a
	// FIFO (opening it must not block), a file past the size read here.
	outside := t.TempDir()
	makeFile(t, outside, "-f", "lavfi", "-i", "testsrc=s=23x17", "-frames:v", "1", "secret.png")
	os.Symlink(filepath.Join(outside, "secret.png"), filepath.Join(work, "outputs", "x.png"))
	os.Symlink(outside, filepath.Join(work, "outputs", "d"))
	if err := syscall.Mkfifo(filepath.Join(work, "outputs", "fifo.png"), 0o644); err != nil {
		t.Fatal(err)
	}
	sparse, err := os.Create(filepath.Join(work, "outputs", "sparse.png"))
	if err != nil {
		t.Fatal(err)
	}
	sparse.Write(pngB)
	sparse.Truncate(imageProbeMaxBytes + 1)
	sparse.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, rel := range []string{"outputs/x.png", "outputs/d/secret.png", "outputs/fifo.png", "outputs/sparse.png", "../" + filepath.Base(outside) + "/secret.png"} {
			if p, ok := probeImage(work, rel); ok {
				t.Errorf("%s: probed in process through a link or past the limits: %s", rel, showProbe(p))
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the in-process probe blocked (on the FIFO?)")
	}
	if _, ok := probeImage(outside, "secret.png"); !ok {
		t.Fatal("the image behind the links is one the probe reads: the test proves nothing")
	}
}

// TestProbeThroughALinkSandboxed: an output that is a link out of the job goes
// to ffprobe, which in the sandbox (raw_exec pools) sees nothing outside the job.
func TestProbeThroughALinkSandboxed(t *testing.T) {
	testenv.Binary(t, "bwrap")
	work, outside := t.TempDir(), t.TempDir()
	makeFile(t, outside, "-f", "lavfi", "-i", "testsrc=s=23x17", "-frames:v", "1", "secret.png")
	os.MkdirAll(filepath.Join(work, "outputs"), 0o755)
	os.Symlink(filepath.Join(outside, "secret.png"), filepath.Join(work, "outputs", "x.png"))
	os.Symlink(outside, filepath.Join(work, "outputs", "d"))
	r := &Runner{WorkDir: work, Log: io.Discard, FFprobe: testenv.Binary(t, "ffprobe"), Sandbox: &sandbox.Bwrap{}}
	for _, rel := range []string{"outputs/x.png", "outputs/d/secret.png"} {
		if p, err := r.probe(context.Background(), rel); err == nil {
			t.Errorf("%s: probed the file outside the job: %s", rel, showProbe(p))
		}
	}
}

// TestProbeImageMutations: images with bytes flipped, cut or added are probed in
// process only when the answer is still ffprobe's; none crashes the runner.
func TestProbeImageMutations(t *testing.T) {
	testenv.Binary(t, "ffprobe")
	work := t.TempDir()
	out := filepath.Join(work, "outputs")
	bases := []struct {
		name string
		args []string
	}{
		{"p.png", []string{"-f", "lavfi", "-i", "testsrc=s=48x32", "-frames:v", "1"}},
		{"s.jpg", []string{"-f", "lavfi", "-i", "testsrc=s=24x16", "-frames:v", "1"}},
		{"b.jpg", []string{"-f", "lavfi", "-i", "testsrc=s=160x90", "-frames:v", "1"}},
		{"l.webp", []string{"-f", "lavfi", "-i", "testsrc=s=48x32", "-frames:v", "1"}},
		{"x.webp", []string{"-f", "lavfi", "-i", "testsrc=s=48x32", "-frames:v", "1", "-lossless", "1"}},
	}
	rng := rand.New(rand.NewSource(32))
	r := &Runner{WorkDir: work, Log: io.Discard, FFprobe: testenv.Binary(t, "ffprobe")}
	inProcess, n := 0, 0
	for _, base := range bases {
		name := base.name
		makeFile(t, out, append(base.args, name)...)
		orig, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			b := bytes.Clone(orig)
			switch i % 3 {
			case 0: // flip a few bytes, in the headers more often
				for range 1 + rng.Intn(3) {
					at := rng.Intn(min(len(b), 64+rng.Intn(len(b))))
					b[at] ^= byte(1 + rng.Intn(255))
				}
			case 1:
				b = b[:rng.Intn(len(b))]
			case 2:
				at := rng.Intn(len(b))
				b = append(b[:at:at], append(bytes.Repeat([]byte{byte(rng.Intn(256))}, 1+rng.Intn(8)), b[at:]...)...)
			}
			rel := fmt.Sprintf("outputs/m%d-%s", i, name)
			os.WriteFile(filepath.Join(work, rel), b, 0o644)
			n++
			p, ok := probeImage(work, rel)
			if !ok {
				continue // ffprobe's answer, as before
			}
			inProcess++
			want, err := r.runFFprobe(context.Background(), rel)
			if err != nil || !sameProbe(p, want) {
				t.Errorf("%s: in process %s, ffprobe %s (%v)", rel, showProbe(p), showProbe(want), err)
			}
		}
	}
	t.Logf("%d of %d mutated images probed in process, as ffprobe does", inProcess, n)
}

// BenchmarkTrivialJob runs the trivial job (a 16×16 PNG) through
// Fetch and Exec in the bubblewrap sandbox, as a raw_exec or warm runner does,
// with the output probed by ffprobe (as before) and in process; and the probe
// alone. Besides the time, it reports the CPU time of the runner's children
// (ffmpeg, ffprobe, bwrap) and of the runner itself.
// go test ./runner -run '^$' -bench TrivialJob -benchtime 20x
func BenchmarkTrivialJob(b *testing.B) {
	testenv.Binary(b, "ffmpeg")
	testenv.Binary(b, "ffprobe")
	testenv.Binary(b, "bwrap")
	job := func(b *testing.B) *Runner {
		m := &mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.png"}, TimeoutSeconds: 60,
			FFmpegCommands: []string{"-f lavfi -i color=c=black:s=16x16:d=0.1 -frames:v 1 outputs/o.png"}}
		r := &Runner{WorkDir: b.TempDir(), Log: io.Discard, Sandbox: &sandbox.Bwrap{}}
		st := r.Fetch(context.Background(), m)
		r.Exec(context.Background(), m, st)
		if st.Failed || len(st.Outputs) != 1 || st.Outputs[0].Probe == nil || st.Outputs[0].Probe.Format != "png_pipe" {
			b.Fatalf("job: %+v", st)
		}
		return r
	}
	for _, part := range []string{"job", "probe"} {
		for _, mode := range []struct {
			name      string
			inProcess bool
		}{{"ffprobe", false}, {"in-process", true}} {
			b.Run(part+"/"+mode.name, func(b *testing.B) {
				defer func(v bool) { inProcessProbe = v }(inProcessProbe)
				inProcessProbe = mode.inProcess
				var r *Runner
				if part == "probe" {
					r = job(b)
				}
				self, children := rusage(b, syscall.RUSAGE_SELF), rusage(b, syscall.RUSAGE_CHILDREN)
				for b.Loop() {
					if part == "job" {
						job(b)
					} else if p, err := r.probe(context.Background(), "outputs/o.png"); err != nil || p.Streams[0].Width != 16 {
						b.Fatalf("probe: %s %v", showProbe(p), err)
					}
				}
				ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
				b.ReportMetric(ms(rusage(b, syscall.RUSAGE_CHILDREN)-children), "children-cpu-ms/op")
				b.ReportMetric(ms(rusage(b, syscall.RUSAGE_SELF)-self), "runner-cpu-ms/op")
			})
		}
	}
}

func rusage(t testing.TB, who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A JPEG that is not sequential (progressive: Go's decoder works in proportion
// to scans × blocks, and a file can hold thousands of tiny scans), or has more
// scans than components, is left to ffprobe, read by its markers alone; a
// sequential one is decoded here.
func TestProbeImageLeavesProgressiveJPEGsToFFprobe(t *testing.T) {
	work := t.TempDir()
	os.MkdirAll(filepath.Join(work, "outputs"), 0o755)
	var buf bytes.Buffer
	img := image.NewGray(image.Rect(0, 0, 64, 48))
	if err := jpeg.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	base := buf.Bytes()
	write := func(name string, b []byte) string {
		if err := os.WriteFile(filepath.Join(work, "outputs", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "outputs/" + name
	}
	if _, ok := probeImage(work, write("base.jpg", base)); !ok {
		t.Fatal("a baseline JPEG was not probed in process")
	}
	if !jpegSequential(bytes.NewReader(base)) {
		t.Fatal("a baseline JPEG does not read as sequential")
	}
	sof := bytes.Index(base, []byte{0xff, 0xc0})
	sos := bytes.Index(base, []byte{0xff, 0xda})
	if sof < 0 || sos < 0 {
		t.Fatal("the encoder's JPEG has no SOF0 or SOS")
	}
	progressive := bytes.Clone(base)
	progressive[sof+1] = 0xc2
	eoi := len(base) - 2
	many := append(bytes.Clone(base[:eoi]), bytes.Repeat(base[sos:eoi], 5)...)
	many = append(many, 0xff, 0xd9)
	for name, b := range map[string][]byte{"progressive.jpg": progressive, "many-scans.jpg": many, "truncated.jpg": base[:sos+20]} {
		if jpegSequential(bytes.NewReader(b)) {
			t.Errorf("%s reads as a sequential JPEG", name)
		}
		if _, ok := probeImage(work, write(name, b)); ok {
			t.Errorf("%s was decoded in process", name)
		}
	}
}
