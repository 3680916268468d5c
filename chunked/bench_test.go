package chunked

// Issue 34's benchmarks (docs/chunked.md, "Measured overhead and scaling"):
// one 720p encode as one ffmpeg run and as the chunked flow (probe, split,
// encode each chunk, audio, stitch, verify) on this machine, in the same
// process; the quality of both against the source (PSNR, frame-aligned); and
// a model that projects the measured phases onto a 2-hour 1080p source on N
// workers. Nothing here asserts a timing: the figures are reported metrics.
//
//	go test -run '^$' -bench Chunked -benchtime=1x -timeout 60m ./chunked/
//
// The x264 source is the 2 minutes; x265's is 60 s unless
// BENCH_LONG=1 (2 minutes too); BENCH_CHUNKS (default 4)
// sets how many chunks the source is cut into; BENCH_SECONDS, the source's
// length.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/testenv"
)

// benchCase is one user's command on a source made for it.
type benchCase struct {
	encoder string
	// args are the user's output options (video and audio), between the
	// input and the output.
	args string
	// seconds of source: short by default, long with BENCH_LONG=1.
	short, long float64
}

var (
	benchX264 = benchCase{"libx264", "-c:v libx264 -preset medium -crf 23 -c:a aac -b:a 128k -movflags +faststart", 120, 120}
	benchX265 = benchCase{"libx265", "-c:v libx265 -preset medium -crf 28 -x265-params log-level=error -tag:v hvc1 -c:a aac -b:a 128k -movflags +faststart", 60, 120}
)

const (
	benchW, benchH = 1280, 720
	benchRate      = 25
	// seamHalf is half a seam's window, in frames: the window is the frames
	// from seamHalf before the seam to seamHalf after it.
	seamHalf = 12
)

// BenchmarkChunkedX264 is the overhead on one worker (issue 34): x264
// medium, 720p, chunked against one encode of the same command.
func BenchmarkChunkedX264(b *testing.B) { benchChunked(b, benchX264) }

// BenchmarkChunkedX265 is the same for x265 medium; its per-chunk times feed
// the 16-worker target of the scaling model.
func BenchmarkChunkedX265(b *testing.B) { benchChunked(b, benchX265) }

func benchChunked(b *testing.B, bc benchCase) {
	ffmpeg := testenv.Binary(b, "ffmpeg")
	ffprobe := testenv.Binary(b, "ffprobe")
	if out, _ := exec.Command(ffmpeg, "-hide_banner", "-encoders").Output(); !strings.Contains(string(out), " "+bc.encoder+" ") {
		testenv.Missing(b, "ffmpeg with the "+bc.encoder+" encoder")
	}
	seconds := bc.short
	if os.Getenv("BENCH_LONG") == "1" {
		seconds = bc.long
	}
	if v, err := strconv.ParseFloat(os.Getenv("BENCH_SECONDS"), 64); err == nil && v > 0 {
		seconds = v
	}
	nChunks := 4
	if v, err := strconv.Atoi(os.Getenv("BENCH_CHUNKS")); err == nil && v > 1 {
		nChunks = v
	}
	r := newBenchRig(b)
	// A camera-like source: moving test pattern with a little grain, AAC
	// audio, a keyframe every 2 s (scene cuts left on), high quality.
	dur := strconv.FormatFloat(seconds, 'f', -1, 64)
	r.ffmpeg(ffmpeg, "-y", "-f", "lavfi", "-i", fmt.Sprintf("testsrc2=s=%dx%d:r=%d:d=%s,noise=alls=3:allf=t", benchW, benchH, benchRate, dur),
		"-f", "lavfi", "-i", "sine=f=440:r=48000:d="+dur,
		"-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-g", fmt.Sprint(2*benchRate), "-pix_fmt", "yuv420p",
		"-c:a", "aac", "-b:a", "128k", "inputs/src.mp4")

	// ns/op is a round: one encode, the chunked flow and both PSNRs.
	b.ResetTimer()
	var rounds []*benchResult
	for i := 0; i < b.N; i++ {
		// The same process, one after the other, every round: the machine's
		// other load falls on both alike as far as it can.
		rounds = append(rounds, r.measure(ffmpeg, ffprobe, bc, seconds, nChunks))
	}
	b.StopTimer()
	res := rounds[len(rounds)-1]
	ratios := make([]float64, len(rounds))
	for i, x := range rounds {
		ratios[i] = x.chunkedTotal() / x.single
	}
	sort.Float64s(ratios)
	ratio := ratios[len(ratios)/2]
	for i, x := range rounds {
		ratios[i] = x.chunkedCPU() / x.singleCPU
	}
	sort.Float64s(ratios)
	cpuRatio := ratios[len(ratios)/2]
	m := res.model(seconds)
	b.ReportMetric(seconds, "src-s")
	b.ReportMetric(float64(len(res.chunks)), "chunks")
	b.ReportMetric(res.single, "single-s")
	b.ReportMetric(res.chunkedTotal(), "chunked-s")
	b.ReportMetric(ratio, "overhead-x")
	b.ReportMetric(res.singleCPU, "single-cpu-s")
	b.ReportMetric(res.chunkedCPU(), "chunked-cpu-s")
	b.ReportMetric(cpuRatio, "cpu-overhead-x")
	b.ReportMetric(res.probe, "probe-s")
	b.ReportMetric(res.split, "split-s")
	b.ReportMetric(sum(res.encode), "encode-s")
	b.ReportMetric(res.audio, "audio-s")
	b.ReportMetric(res.stitch, "stitch-s")
	b.ReportMetric(res.verify, "verify-s")
	b.ReportMetric(res.psnrSingle-res.psnrChunked, "psnr-loss-dB")
	b.ReportMetric(res.worstSeam, "seam-loss-dB")
	b.ReportMetric(100*(res.bytesChunked/res.bytesSingle-1), "bitrate-%")
	for _, n := range []int{4, 8, 16} {
		b.ReportMetric(m.one/m.wall(n), fmt.Sprintf("speedup-%d", n))
	}
	// The last call's table: -benchtime=Nx calls once with b.N = 1 first.
	benchTables[b.Name()] = res.table(bc, seconds, ratio, cpuRatio, len(rounds), m)
}

// benchTables are the benchmarks' tables, printed whole once they all ran
// (the testing package cuts a benchmark's log to 10 lines).
var benchTables = map[string]string{}

func TestMain(m *testing.M) {
	code := m.Run()
	names := make([]string, 0, len(benchTables))
	for n := range benchTables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println(benchTables[n])
	}
	os.Exit(code)
}

// benchRig runs ffmpeg in a job-like directory, as e2e_test.go's rig does,
// for a benchmark.
type benchRig struct {
	tb  testing.TB
	dir string
	ctx context.Context
	// procs counts the tools run, so that the model scales each's start-up
	// cost (startupCPU) by how many run at scale, not by pixels.
	procs int
}

func newBenchRig(tb testing.TB) *benchRig {
	dir := tb.TempDir()
	for _, d := range []string{"inputs", "outputs", "chunks"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	tb.Cleanup(cancel)
	return &benchRig{tb: tb, dir: dir, ctx: ctx}
}

// ffmpeg runs it in the rig's directory and answers how long it took, and
// its CPU time (user + system, s).
func (r *benchRig) ffmpeg(ffmpeg string, args ...string) (wall, cpu float64) {
	r.tb.Helper()
	cmd := exec.CommandContext(r.ctx, ffmpeg, append([]string{"-nostdin", "-hide_banner", "-v", "error"}, args...)...)
	cmd.Dir = r.dir
	start := time.Now()
	r.procs++
	if out, err := cmd.CombinedOutput(); err != nil {
		r.tb.Fatalf("ffmpeg %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 3000))
	}
	return time.Since(start).Seconds(), (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

func (r *benchRig) size(name string) float64 {
	st, err := os.Stat(filepath.Join(r.dir, name))
	if err != nil {
		r.tb.Fatal(err)
	}
	return float64(st.Size())
}

// benchResult is one round: the phases' wall and CPU times (s), sizes
// (bytes) and the quality of both encodes against the source.
type benchResult struct {
	// Wall times: one encode and the chunked phases (encode per chunk, with
	// its decode and hash; hash is those decodes' sum).
	single, probe, split, audio, stitch, verify, hash float64
	encode                                            []float64
	// CPU times (user + system) of the same.
	singleCPU, probeCPU, splitCPU, audioCPU, stitchCPU, verifyCPU, hashCPU float64
	encodeCPU                                                              []float64
	hashCPUs                                                               []float64 // each chunk's decode and hash
	// Tools run per phase, and one's start-up CPU time (s): an ffmpeg that
	// does nothing.
	probeProcs, splitProcs, verifyProcs, hashProcs int
	startupCPU                                     float64
	// The verification's decode (DecodeCheck): its mode, the frames it
	// decoded, and the most frames from one keyframe of the chunked output
	// to the next (the most a seam's lead-in decodes).
	decodeMode              string
	seamFrames, frames, gop int
	seamCPU                 float64 // the seams' decodes, of verifyCPU

	chunks []Chunk
	// Sizes: the source, each chunk's split and encode, the stitched file,
	// and the video streams of both encodes.
	srcBytes, outBytes        float64
	splitBytes, encBytes      []float64
	bytesSingle, bytesChunked float64
	// Mean luma PSNR against the source (dB), and the largest loss of a
	// seam's window and where it is (s).
	psnrSingle, psnrChunked float64
	worstSeam, worstSeamAt  float64
}

func (x *benchResult) chunkedTotal() float64 {
	return x.probe + x.split + sum(x.encode) + x.audio + x.stitch + x.verify
}

// chunkedCPU is the chunked flow's CPU time: unlike wall time, hardly moved
// by other work on the machine.
func (x *benchResult) chunkedCPU() float64 {
	return x.probeCPU + x.splitCPU + sum(x.encodeCPU) + x.audioCPU + x.stitchCPU + x.verifyCPU
}

// measure encodes the source once as the user's command and once chunked,
// then compares both with the source.
func (r *benchRig) measure(ffmpeg, ffprobe string, bc benchCase, seconds float64, nChunks int) *benchResult {
	tb := r.tb
	tb.Helper()
	userCmd := "-i inputs/src.mp4 " + bc.args + " outputs/out.mp4"
	argv, err := command.Prepare(userCmd, testSpec)
	if err != nil {
		tb.Fatalf("command.Prepare: %v", err)
	}
	cmd, err := Parse(argv)
	if err != nil {
		tb.Fatalf("Parse: %v", err)
	}
	res := &benchResult{startupCPU: r.startupCPU(ffmpeg)}
	// Probe, HashChunk and Verify run their tools through ctx: counted.
	// The seams' decodes are timed on their own (verifyModel).
	ctx := WithCommander(r.ctx, func(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
		r.procs++
		return exec.CommandContext(ctx, name, args...), nil
	}, func(c *exec.Cmd) {
		if c.ProcessState != nil && slices.Contains(c.Args, "-seek_timestamp") {
			res.seamCPU += (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		}
	})

	// One encode: the user's command as it stands.
	single := append([]string{"-y"}, argv[:len(argv)-1]...)
	res.single, res.singleCPU = r.ffmpeg(ffmpeg, append(single, "outputs/single.mp4")...)

	// Chunked: the steps of docs/chunked.md in turn, on this one machine.
	cpu := childCPU()
	start := time.Now()
	procs := r.procs
	src, err := Probe(ctx, ffprobe, filepath.Join(r.dir, cmd.Input))
	if err != nil {
		tb.Fatalf("Probe: %v", err)
	}
	src.Path = cmd.Input
	res.chunks, err = src.Plan(seconds/float64(nChunks), 0)
	if err != nil {
		tb.Fatalf("Plan: %v", err)
	}
	res.probe, res.probeCPU = time.Since(start).Seconds(), childCPU()-cpu
	res.probeProcs, procs = r.procs-procs, r.procs
	var hashes []*ChunkHashes
	var names []string
	for i, c := range res.chunks {
		split := fmt.Sprintf("chunks/split_%03d.nut", i)
		w, cpu := r.ffmpeg(ffmpeg, SplitArgs(src, cmd, c, split)...)
		res.split, res.splitCPU = res.split+w, res.splitCPU+cpu
		res.splitBytes = append(res.splitBytes, r.size(split))
	}
	res.splitProcs = r.procs - procs
	for i, c := range res.chunks {
		split := fmt.Sprintf("chunks/split_%03d.nut", i)
		enc := fmt.Sprintf("chunks/enc_%03d.nut", i)
		w, cpu := r.ffmpeg(ffmpeg, EncodeArgs(cmd, c, split, enc)...)
		// The encode job then decodes and hashes its chunk (HashChunk):
		// its time is the job's, in parallel with the other chunks'.
		hcpu, hstart, hprocs := childCPU(), time.Now(), r.procs
		h, err := HashChunk(ctx, ffmpeg, cmd.Codec(), filepath.Join(r.dir, enc))
		if err != nil {
			tb.Fatalf("HashChunk: %v", err)
		}
		hw, hc := time.Since(hstart).Seconds(), childCPU()-hcpu
		res.hashProcs += r.procs - hprocs
		hashes = append(hashes, h)
		res.hash, res.hashCPU, res.hashCPUs = res.hash+hw, res.hashCPU+hc, append(res.hashCPUs, hc)
		res.encode, res.encodeCPU = append(res.encode, w+hw), append(res.encodeCPU, cpu+hc)
		res.encBytes = append(res.encBytes, r.size(enc))
		names = append(names, filepath.Base(enc))
	}
	aux := ""
	if cmd.NeedsAux(src) {
		aux = "chunks/aux" + filepath.Ext(cmd.Output)
		res.audio, res.audioCPU = r.ffmpeg(ffmpeg, AuxArgs(cmd, aux)...)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "chunks/list.txt"), []byte(ConcatList(res.chunks, names)), 0o644); err != nil {
		tb.Fatal(err)
	}
	res.stitch, res.stitchCPU = r.ffmpeg(ffmpeg, StitchArgs(src, cmd, "chunks/list.txt", aux)...)
	src.Path = filepath.Join(r.dir, cmd.Input)
	cpu, start, procs = childCPU(), time.Now(), r.procs
	rep, err := Verify(ctx, ffmpeg, ffprobe, src, res.chunks, hashes, filepath.Join(r.dir, cmd.Output))
	if err != nil {
		tb.Fatalf("Verify: %v", err)
	}
	res.verify, res.verifyCPU = time.Since(start).Seconds(), childCPU()-cpu
	res.verifyProcs = r.procs - procs
	res.decodeMode, res.seamFrames, res.frames = rep.Decode.Mode, rep.Decode.Frames, rep.ExpectedFrames
	res.gop = r.longestGOP(ffprobe, cmd.Output)
	if !rep.Pass {
		tb.Fatalf("verification failed: %s", strings.Join(rep.Failures, "; "))
	}

	// Quality and size, neither timed.
	res.srcBytes = r.size("inputs/src.mp4")
	res.outBytes = r.size(cmd.Output)
	res.bytesSingle = r.videoBytes(ffprobe, "outputs/single.mp4")
	res.bytesChunked = r.videoBytes(ffprobe, cmd.Output)
	ps := r.psnr(ffmpeg, "outputs/single.mp4", "psnr_single.log")
	pc := r.psnr(ffmpeg, cmd.Output, "psnr_chunked.log")
	if len(ps) != len(pc) || len(pc) != rep.ExpectedFrames {
		tb.Fatalf("PSNR over %d frames (single) and %d (chunked), want %d", len(ps), len(pc), rep.ExpectedFrames)
	}
	res.psnrSingle, res.psnrChunked = mean(ps), mean(pc)
	res.worstSeam = math.Inf(-1)
	first := 0
	for _, c := range res.chunks {
		if c.Index > 0 {
			lo, hi := max(first-seamHalf, 0), min(first+seamHalf, len(pc))
			if loss := mean(ps[lo:hi]) - mean(pc[lo:hi]); loss > res.worstSeam {
				res.worstSeam, res.worstSeamAt = loss, c.Start
			}
		}
		first += c.Frames
	}
	return res
}

// startupCPU is the CPU time (s) of an ffmpeg that does nothing: what each
// tool run costs besides its work. The least of three runs.
func (r *benchRig) startupCPU(ffmpeg string) float64 {
	least := math.Inf(1)
	for range 3 {
		_, cpu := r.ffmpeg(ffmpeg, "-f", "lavfi", "-i", "nullsrc=s=16x16:d=0.04", "-f", "null", "-")
		r.procs--
		least = math.Min(least, cpu)
	}
	return least
}

// longestGOP is the most packets from one keyframe of name's video to the
// next (or to its end).
func (r *benchRig) longestGOP(ffprobe, name string) int {
	pkts, _, err := probePackets(r.ctx, ffprobe, filepath.Join(r.dir, name), 0)
	if err != nil {
		r.tb.Fatal(err)
	}
	longest, last := 0, 0
	for i, p := range pkts {
		if p.Key {
			longest, last = max(longest, i-last), i
		}
	}
	return max(longest, len(pkts)-last)
}

// videoBytes sums the sizes of the file's video packets.
func (r *benchRig) videoBytes(ffprobe, name string) float64 {
	out, err := exec.CommandContext(r.ctx, ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=size", "-of", "csv=p=0", filepath.Join(r.dir, name)).Output()
	if err != nil {
		r.tb.Fatalf("ffprobe %s: %v", name, err)
	}
	var n float64
	for _, f := range strings.Fields(string(out)) {
		v, err := strconv.ParseFloat(strings.TrimSuffix(f, ","), 64)
		if err != nil {
			r.tb.Fatalf("ffprobe %s: packet size %q", name, f)
		}
		n += v
	}
	return n
}

// psnr is each frame's luma PSNR of name against the source, frame by frame
// in presentation order: setpts=N on both sides, in one time base (the
// stitched file keeps the source's, the single encode its muxer's), aligns
// them by number.
func (r *benchRig) psnr(ffmpeg, name, stats string) []float64 {
	r.ffmpeg(ffmpeg, "-i", name, "-i", "inputs/src.mp4",
		"-lavfi", fmt.Sprintf("[0:v]settb=1/%d,setpts=N[a];[1:v]settb=1/%d,setpts=N[b];[a][b]psnr=stats_file=%s", benchRate, benchRate, stats), "-f", "null", "-")
	v, err := parsePSNR(filepath.Join(r.dir, stats))
	if err != nil {
		r.tb.Fatal(err)
	}
	return v
}

// parsePSNR reads psnr_y from each line of the psnr filter's stats file;
// identical frames (inf) count as 100 dB.
func parsePSNR(path string) ([]float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v []float64
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if s, ok := strings.CutPrefix(f, "psnr_y:"); ok {
				p, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %q", path, sc.Text())
				}
				v = append(v, math.Min(p, 100))
			}
		}
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("%s: no psnr_y", path)
	}
	return v, nil
}

// The model's assumptions (docs/chunked.md, "Measured overhead and scaling").
const (
	modelSeconds   = 2 * 3600                                    // a 2-hour source
	modelPixels    = float64(1920*1080) / float64(benchW*benchH) // 1080p against the measured 720p
	modelChunkSecs = 60                                          // the default chunk_seconds...
	modelMaxChunks = 64                                          // ...and max_chunks
	modelBandwidth = 100e6                                       // bytes/s to and from storage, per worker
	modelJobStart  = 1.0                                         // s from release to a running job (a per-job pool)
	// A worker is a machine like this one, its own: a phase takes its CPU
	// time over its 2 cores. CPU time, not wall time, because the machine
	// measured on is shared: its wall times move with others' load.
	modelCores = 2
	// modelSlow is how much costlier per frame camera footage may be to
	// encode than the synthetic source (docs/chunked.md).
	modelSlow = 4.5
)

// scaleModel is a chunked encode's projected wall time: serial work (the
// plan, the stitch and verification, their transfers and job starts), plus
// the chunks' encodes (with their transfers and starts) spread over workers.
type scaleModel struct {
	one    float64   // one worker, one ordinary encode (no chunks)
	serial float64   // plan + stitch + verify, with transfers and starts
	chunks []float64 // each chunk's encode with its transfers and start
}

// wall is the time on n workers: chunk i is released once chunk i-n is done
// (max_workers = n) and runs on the first worker free.
func (m scaleModel) wall(n int) float64 {
	free := make([]float64, n)
	done := make([]float64, len(m.chunks))
	end := 0.0
	for i, d := range m.chunks {
		w := 0
		for j := range free {
			if free[j] < free[w] {
				w = j
			}
		}
		start := free[w]
		if i >= n {
			start = math.Max(start, done[i-n])
		}
		done[i] = start + d
		free[w] = done[i]
		end = math.Max(end, done[i])
	}
	return m.serial + end
}

// model projects the round onto a 2-hour 1080p source (times from CPU
// times, modelCores): encode, split, stitch and verification times and
// sizes scale with pixels × duration, the probe with duration; the chunks are as many as the defaults make (64 of
// 112.5 s), each costing per second of source what the measured chunk at its
// place in the cycle cost. Each chunk's decode and hash, which its encode
// job runs (HashChunk), is in its chunk's time: in the parallel part.
func (x *benchResult) model(seconds float64) scaleModel { return x.modelSlower(seconds, 1) }

// modelSlower is model with the encodes (the one encode and each chunk's,
// not the chunks' decodes) slow times as costly per frame: footage harder
// to encode than the synthetic source.
func (x *benchResult) modelSlower(seconds, slow float64) scaleModel {
	k := modelSeconds / seconds // duration
	px := modelPixels * k       // pixels × duration
	n := int(math.Ceil(modelSeconds / modelChunkSecs))
	if n > modelMaxChunks {
		n = modelMaxChunks
	}
	secs := float64(modelSeconds) / float64(n)
	src := x.srcBytes * px
	out := x.outBytes * px
	m := scaleModel{
		one: slow*x.singleCPU/modelCores*px + (src+out)/modelBandwidth + modelJobStart,
		// plan: fetch the source, probe, split, store the chunks; stitch:
		// fetch the encoded chunks, stitch, verify, store the output.
		serial: x.scaled(x.probeCPU, x.probeProcs, x.probeProcs, k) + x.scaled(x.splitCPU, x.splitProcs, n, px) + 2*src/modelBandwidth + modelJobStart +
			x.scaled(x.stitchCPU, 1, 1, px) + x.verifyModel(px, n) + 2*out/modelBandwidth + modelJobStart,
	}
	for i := 0; i < n; i++ {
		j := i % len(x.chunks)
		d := x.chunks[j].End - x.chunks[j].Start
		f := modelPixels * secs / d // this chunk's measured cost, scaled
		cpu := slow*(x.encodeCPU[j]-x.hashCPUs[j]) + x.hashCPUs[j]
		m.chunks = append(m.chunks, cpu/modelCores*f+(x.splitBytes[j]+x.encBytes[j])*f/modelBandwidth+modelJobStart)
	}
	return m
}

// scaled is a phase's time at scale (s on modelCores) from its measured CPU
// time (s) over procs tools: the work scales by scale, the tools' start-up
// by how many run at scale (atScale).
func (x *benchResult) scaled(cpu float64, procs, atScale int, scale float64) float64 {
	work := math.Max(cpu-float64(procs)*x.startupCPU, 0)
	return (work*scale + float64(atScale)*x.startupCPU) / modelCores
}

// verifyModel is the verification's time at scale (s), for n chunks. With
// DecodeSeams its decode is per seam: the frames from the keyframe before
// it (at most the output's longest GOP) to DecodeWindow past it, each at
// what a frame cost the measured seams' decodes, times the pixels, with a
// tool's start-up each; the rest (the packets' hashes, the audio's decode,
// the probe) scales with pixels × duration. With DecodeFull all of it does.
func (x *benchResult) verifyModel(px float64, n int) float64 {
	if x.decodeMode != DecodeSeams {
		return x.scaled(x.verifyCPU, x.verifyProcs, x.verifyProcs, px)
	}
	windows := x.verifyProcs - 2 // besides the probe and the packets' pass
	perFrame := math.Max(x.seamCPU-float64(windows)*x.startupCPU, 0) / float64(x.seamFrames)
	return x.scaled(x.verifyCPU-x.seamCPU, x.verifyProcs-windows, 2, px) +
		float64(n-1)*(x.startupCPU+float64(x.gop+DecodeWindow)*perFrame*modelPixels)/modelCores
}

func (x *benchResult) table(bc benchCase, seconds, ratio, cpuRatio float64, rounds int, m scaleModel) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s, %.0f s of %dx%d at %d fps, %d chunks (%s)\n\n", bc.encoder, seconds, benchW, benchH, benchRate, len(x.chunks), bc.args)
	fmt.Fprintf(&b, "wall time ratio %.3f ×, CPU time ratio %.3f × (CPU: one encode %.1f s, chunked %.1f s; medians over %d rounds, the phases below from the last)\n\n",
		ratio, cpuRatio, x.singleCPU, x.chunkedCPU(), rounds)
	per := func(v []float64) string {
		a := make([]string, len(v))
		for i, e := range v {
			a[i] = fmt.Sprintf("%.1f", e)
		}
		return strings.Join(a, ", ")
	}
	fmt.Fprintf(&b, "| last round | wall (s) | CPU (s) |\n|---|---:|---:|\n")
	for _, p := range []struct {
		what      string
		wall, cpu float64
		note      string
	}{
		{"one encode", x.single, x.singleCPU, ""},
		{"chunked, all phases", x.chunkedTotal(), x.chunkedCPU(), ""},
		{"– probe and plan", x.probe, x.probeCPU, ""},
		{"– split", x.split, x.splitCPU, ""},
		{"– encodes, each with its decode and hash", sum(x.encode), sum(x.encodeCPU), " (" + per(x.encode) + "; CPU " + per(x.encodeCPU) + ")"},
		{"– of which decode and hash", x.hash, x.hashCPU, ""},
		{"– audio", x.audio, x.audioCPU, ""},
		{"– stitch", x.stitch, x.stitchCPU, ""},
		{"– verify (the stitched file): decode " + x.decodeMode + fmt.Sprintf(", %d of %d frames; %d tools", x.seamFrames, x.frames, x.verifyProcs), x.verify, x.verifyCPU, ""},
	} {
		fmt.Fprintf(&b, "| %s%s | %.2f | %.2f |\n", p.what, p.note, p.wall, p.cpu)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "| quality | one encode | chunked | difference | target |\n|---|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| mean luma PSNR (dB) | %.3f | %.3f | %.3f | ≤ 0.1 |\n", x.psnrSingle, x.psnrChunked, x.psnrSingle-x.psnrChunked)
	fmt.Fprintf(&b, "| worst seam window, %d frames (dB lost) | | at %.2f s | %.3f | ≤ 0.5 |\n", 2*seamHalf, x.worstSeamAt, x.worstSeam)
	fmt.Fprintf(&b, "| video bitrate (kbit/s) | %.0f | %.0f | %+.2f %% | ± 2 %% |\n\n",
		x.bytesSingle*8/seconds/1e3, x.bytesChunked*8/seconds/1e3, 100*(x.bytesChunked/x.bytesSingle-1))
	fmt.Fprintf(&b, "tools' start-up %.3f CPU s each; the output's longest GOP %d frames\n\n", x.startupCPU, x.gop)
	fmt.Fprintf(&b, "model, 2-hour 1080p: one worker %.0f s (%.1f h); serial %.0f s (verify %.0f s of it); %d chunks of %.1f s of source, each ≈ %.0f s (its decode and hash ≈ %.0f s of it)\n\n",
		m.one, m.one/3600, m.serial, x.verifyModel(modelPixels*modelSeconds/seconds, len(m.chunks)), len(m.chunks), modelSeconds/float64(len(m.chunks)), mean(m.chunks),
		x.hashCPU/modelCores*modelPixels*modelSeconds/seconds/float64(len(m.chunks)))
	// The same model with the tools' start-up scaled with pixels × duration,
	// as the model did before it told them from their work.
	asBefore := *x
	asBefore.startupCPU = 0
	fmt.Fprintf(&b, "the same model with every tool's start-up scaled as its work (as the model did before): serial %.0f s, %.2f × at 16 workers\n\n",
		asBefore.model(seconds).serial, asBefore.model(seconds).one/asBefore.model(seconds).wall(16))
	slow := x.modelSlower(seconds, modelSlow)
	fmt.Fprintf(&b, "| workers | wall (s) | speed-up over one | with the encodes %.1f × as costly |\n|---:|---:|---:|---:|\n", modelSlow)
	for _, n := range []int{1, 4, 8, 16} {
		fmt.Fprintf(&b, "| %d | %.0f | %.2f × | %.2f × |\n", n, m.wall(n), m.one/m.wall(n), slow.one/slow.wall(n))
	}
	return b.String()
}

// childCPU is the CPU time (s) of this process's ended children: ffmpeg and
// ffprobe, whoever started them.
func childCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return math.NaN()
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return sum(v) / float64(len(v))
}

// The model's scheduler: the window by index holds a slow chunk's successor
// back, and the serial part adds once.
func TestScaleModelWall(t *testing.T) {
	m := scaleModel{serial: 10, chunks: []float64{5, 1, 1, 1}}
	for _, c := range []struct {
		n    int
		want float64
	}{{1, 18}, {2, 16}, {4, 15}} {
		if got := m.wall(c.n); got != c.want {
			t.Errorf("wall(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	// Two workers, window 2: chunk 2 waits for chunk 0 (done at 5) although
	// the second worker is free at 1, so chunk 3 starts at 5 too (6 without
	// the window).
	m = scaleModel{chunks: []float64{5, 1, 1, 4}}
	if got := m.wall(2); got != 9 {
		t.Errorf("wall(2) = %v, want 9", got)
	}
}

func TestParsePSNR(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.log")
	err := os.WriteFile(p, []byte("n:1 mse_avg:0.5 mse_y:0.4 mse_u:0.6 mse_v:0.6 psnr_avg:51.1 psnr_y:52.1 psnr_u:50.3 psnr_v:50.3\nn:2 mse_avg:0 mse_y:0 psnr_avg:inf psnr_y:inf psnr_u:inf psnr_v:inf\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	v, err := parsePSNR(p)
	if err != nil || len(v) != 2 || v[0] != 52.1 || v[1] != 100 {
		t.Fatalf("parsePSNR = %v, %v; want [52.1 100]", v, err)
	}
}
