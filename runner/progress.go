package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// progressEvery is how often a runner reports progress, at most.
const progressEvery = 2 * time.Second

// reporter turns ffmpeg's -progress stream into Progress reports, posted at most
// every progressEvery to the job's signed progress URL.
type reporter struct {
	url      string
	file     string // when set, reports are written here instead of posted
	client   *http.Client
	index    int // 1-based command index
	count    int
	duration float64 // seconds of output expected; 0 when unknown
	last     time.Time
	now      func() time.Time
}

// read consumes ffmpeg's key=value progress blocks until r ends.
func (p *reporter) read(ctx context.Context, r io.Reader) {
	block := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		block[k] = v
		if k != "progress" { // "progress=continue|end" closes a block
			continue
		}
		if pr := p.progress(block); pr != nil && (v == "end" || p.now().Sub(p.last) >= progressEvery) {
			p.last = p.now()
			p.post(ctx, pr)
		}
		block = map[string]string{}
	}
}

// progress computes a report from one block: pure but for the clock.
func (p *reporter) progress(block map[string]string) *mj.Progress {
	pr := &mj.Progress{CommandIndex: p.index, CommandCount: p.count, UpdatedAt: p.now().UTC()}
	pr.FPS, _ = strconv.ParseFloat(block["fps"], 64)
	pr.Speed, _ = strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(block["speed"]), "x"), 64)
	if us, err := strconv.ParseInt(block["out_time_us"], 10, 64); err == nil && us > 0 {
		pr.OutTimeSeconds = float64(us) / 1e6
	}
	if p.duration > 0 {
		pct := min(100, 100*pr.OutTimeSeconds/p.duration)
		if block["progress"] == "end" {
			pct = 100
		}
		pct = float64(int(pct*10)) / 10
		pr.Percent = &pct
		if pr.Speed > 0 {
			eta := max(0, (p.duration-pr.OutTimeSeconds)/pr.Speed)
			eta = float64(int(eta*10)) / 10
			pr.ETASeconds = &eta
		}
	}
	return pr
}

func (p *reporter) post(ctx context.Context, pr *mj.Progress) {
	b, _ := json.Marshal(pr)
	if p.file != "" {
		tmp := p.file + ".tmp"
		if os.WriteFile(tmp, b, 0o640) == nil {
			os.Rename(tmp, p.file) // readers never see half a report
		}
		return
	}
	if p.url == "" {
		return
	}
	postProgress(ctx, p.client, p.url, b)
}

func postProgress(ctx context.Context, client *http.Client, url string, b []byte) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
}

// ForwardProgress posts the progress file whenever it changes, every
// progressEvery, until ctx ends: the sidecar of docker pools, whose ffmpeg task has
// no network.
func ForwardProgress(ctx context.Context, file, url string) {
	client := &http.Client{Timeout: 5 * time.Second}
	var last []byte
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		if b, err := readSmall(file); err == nil && !bytes.Equal(b, last) {
			last = b
			postProgress(ctx, client, url, b)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readSmall reads a progress file that ffmpeg's task could have replaced: no
// link is followed and at most 64 KiB is read.
func readSmall(file string) ([]byte, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, os.ErrInvalid
	}
	return io.ReadAll(io.LimitReader(f, 64<<10))
}

// expectedDuration is how many seconds of output a command should produce: its -t
// or -to, else the duration of its first input as ffprobe reports it; 0 if unknown.
func (r *Runner) expectedDuration(ctx context.Context, argv []string) float64 {
	var firstInput string
	var t, to float64
	for i := 0; i+1 < len(argv); i++ {
		switch argv[i] {
		case "-i":
			if firstInput == "" {
				firstInput = argv[i+1]
			}
		case "-t":
			if firstInput != "" { // after -i: an output option, the length produced
				t = parseDuration(argv[i+1])
			}
		case "-to":
			if firstInput != "" {
				to = parseDuration(argv[i+1])
			}
		}
	}
	if t > 0 {
		return t
	}
	if to > 0 {
		return to
	}
	if firstInput == "" || strings.Contains(firstInput, ":") {
		return 0
	}
	// A lavfi source (-f lavfi -i sine=duration=1) or a device is no file: don't
	// spend an ffprobe run on it.
	if fi, err := os.Lstat(filepath.Join(r.WorkDir, firstInput)); err != nil || !fi.Mode().IsRegular() {
		return 0
	}
	if p, err := r.probe(ctx, firstInput); err == nil && p.DurationSeconds != nil {
		return *p.DurationSeconds
	}
	return 0
}

// parseDuration reads ffmpeg's time syntax: seconds ("12.5") or [HH:]MM:SS[.m].
func parseDuration(s string) float64 {
	parts := strings.Split(s, ":")
	total := 0.0
	for _, p := range parts {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 {
			return 0
		}
		total = total*60 + v
	}
	return total
}

// probe describes a file of the job, named relative to its directory, as ffprobe
// does: in this process for a still PNG, JPEG or WebP (imageprobe.go) or an
// MP4 or MOV (mp4probe.go) whose answer is certain, else by running ffprobe.
func (r *Runner) probe(ctx context.Context, rel string) (*mj.Probe, error) {
	if p, ok := probeImage(r.WorkDir, rel); ok {
		return p, nil
	}
	if p, ok := probeMP4(r.WorkDir, rel); ok {
		return p, nil
	}
	return r.runFFprobe(ctx, rel)
}

// runFFprobe runs ffprobe on a file of the job, named relative to its directory,
// in the same sandbox as ffmpeg: a playlist or a MOV may name other paths or URLs.
func (r *Runner) runFFprobe(ctx context.Context, rel string) (*mj.Probe, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// "-protocol_whitelist file": ffprobe opens local files only, whatever the
	// file names (the sandbox stops the rest).
	cmd, err := r.readOnlyCommand(ctx, r.ffprobe(), "-v", "error", "-protocol_whitelist", "file", "-show_format", "-show_streams", "-of", "json", "./"+rel)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	out, err := cmd.Output()
	released(cmd)
	r.meter(cmd, start)
	if err != nil {
		return nil, err
	}
	var raw struct {
		Format struct {
			FormatName string `json:"format_name"`
			Duration   string `json:"duration"`
		} `json:"format"`
		Streams []struct {
			CodecType  string `json:"codec_type"`
			CodecName  string `json:"codec_name"`
			Width      int    `json:"width"`
			Height     int    `json:"height"`
			SampleRate string `json:"sample_rate"`
			Channels   int    `json:"channels"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, err
	}
	p := &mj.Probe{Format: raw.Format.FormatName, Streams: []mj.Stream{}}
	if d, err := strconv.ParseFloat(raw.Format.Duration, 64); err == nil {
		p.DurationSeconds = &d
	}
	for _, s := range raw.Streams {
		sr, _ := strconv.Atoi(s.SampleRate)
		p.Streams = append(p.Streams, mj.Stream{Type: s.CodecType, Codec: s.CodecName, Width: s.Width, Height: s.Height, SampleRate: sr, Channels: s.Channels})
	}
	return p, nil
}
