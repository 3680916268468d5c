package runner

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"strings"

	mj "github.com/mediajobs/mediajobs"
	"golang.org/x/image/webp"
	"golang.org/x/sys/unix"
)

// The in-process probe: a still PNG, JPEG or WebP output is described here, with
// the standard library's decoders and golang.org/x/image/webp, exactly as ffprobe
// (FFmpeg 5.1 to 7.x) would describe it, instead of by an ffprobe process in a
// second sandbox, which costs as much as a trivial job's own ffmpeg
// (docs/benchmarks.md). Anything else, and any image whose ffprobe answer is in
// the least doubt, goes to ffprobe as before: probeImage answers ok only when
//   - the content (not the name) is PNG, JPEG or WebP, and whole: one image
//     ending where the file ends, no animation (APNG, animated WebP);
//   - Go decodes the whole image (not just its header), so every marker or chunk
//     ffmpeg reads before it knows the size is valid too;
//   - the size passes FFmpeg's own check (av_image_check_size), and the image is
//     small enough to decode here (imageProbeMaxPixels, imageProbeMaxBytes);
//   - the name cannot make FFmpeg read it as an image2 pattern.
// A job's output is the job's to shape: it is opened through an os.Root of the
// job's directory, never through a link, a regular file only, and a decoder
// panic is a fallback, not a crash.

const (
	// imageProbeMaxBytes and imageProbeMaxPixels bound what the runner reads
	// and decodes in its own memory (at most 32 MB for a 16-bit RGBA image).
	imageProbeMaxBytes  = 64 << 20
	imageProbeMaxPixels = 1 << 22
	// probeWindow is the first buffer FFmpeg's format probe looks at
	// (PROBE_BUF_MIN).
	probeWindow = 2048
	// maxImageChunks bounds the walk of a PNG's or WebP's chunks.
	maxImageChunks = 1 << 16
)

// inProcessProbe can be turned off (by benchmarks) to measure the ffprobe path.
var inProcessProbe = true

var (
	pngMagic = []byte("\x89PNG\r\n\x1a\n")
	jpegSOI  = []byte{0xff, 0xd8}
)

// probeImage describes the file rel of the job's directory workDir as ffprobe
// would, if it is a still image that can be described here for certain.
func probeImage(workDir, rel string) (p *mj.Probe, ok bool) {
	if !inProcessProbe || strings.ContainsAny(rel, "%*?[]{}") {
		// A name such as img%03d.png or *.jpg is a pattern to FFmpeg's image2
		// demuxer, which then reads other files, or none.
		return nil, false
	}
	defer func() {
		if recover() != nil { // a decoder's bug is no runner crash
			p, ok = nil, false
		}
	}()
	f, size, err := openProbed(workDir, rel, imageProbeMaxBytes)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	head := make([]byte, min(size, probeWindow))
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, false
	}
	var format, codec string
	var duration *float64
	var config func(io.Reader) (image.Config, error)
	var decode func(io.Reader) (image.Image, error)
	switch {
	case bytes.HasPrefix(head, pngMagic):
		if !pngWhole(f, size) {
			return nil, false
		}
		format, codec, config, decode = "png_pipe", "png", png.DecodeConfig, png.Decode
	case bytes.HasPrefix(head, jpegSOI):
		if format, duration, ok = jpegFormat(f, size, head, "./"+rel); !ok {
			return nil, false
		}
		// Go's decoder does work in proportion to scans × blocks, with no cap on
		// scans: a progressive file of thousands of tiny scans would hold the
		// runner for minutes. Only sequential files of a scan per component at
		// most are decoded here.
		if !jpegSequential(io.NewSectionReader(f, 0, size)) {
			return nil, false
		}
		codec, config, decode = "mjpeg", jpeg.DecodeConfig, jpeg.Decode
	case len(head) >= 12 && string(head[:4]) == "RIFF" && string(head[8:12]) == "WEBP":
		if !webpStill(f, size) {
			return nil, false
		}
		format, codec, config, decode = "webp_pipe", "webp", webp.DecodeConfig, webp.Decode
	default:
		return nil, false
	}
	cfg, err := config(io.NewSectionReader(f, 0, size))
	if err != nil || !ffmpegSizeOK(cfg.Width, cfg.Height) || cfg.Width*cfg.Height > imageProbeMaxPixels {
		return nil, false
	}
	img, err := decode(io.NewSectionReader(f, 0, size))
	if err != nil || img.Bounds().Dx() != cfg.Width || img.Bounds().Dy() != cfg.Height {
		return nil, false
	}
	return &mj.Probe{Format: format, DurationSeconds: duration,
		Streams: []mj.Stream{{Type: "video", Codec: codec, Width: cfg.Width, Height: cfg.Height}}}, true
}

// openProbed opens the regular file rel of workDir: through an os.Root (no link
// leads out of the job), through no link at all (the file or a directory above
// it: as collectOutputs and openOutput read outputs), without blocking on a
// FIFO, and no bigger than maxBytes.
func openProbed(workDir, rel string, maxBytes int64) (*os.File, int64, error) {
	root, err := os.OpenRoot(workDir)
	if err != nil {
		return nil, 0, err
	}
	defer root.Close() // what it opened stays open
	for i := range len(rel) {
		if rel[i] == '/' {
			if fi, err := root.Lstat(rel[:i]); err != nil || !fi.IsDir() {
				return nil, 0, os.ErrInvalid
			}
		}
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxBytes {
		f.Close()
		return nil, 0, os.ErrInvalid
	}
	return f, fi.Size(), nil
}

// ffmpegSizeOK is FFmpeg's av_image_check_size: a size it refuses, ffprobe
// reports as 0×0.
func ffmpegSizeOK(w, h int) bool {
	return w > 0 && h > 0 && uint64(w+128)*uint64(h+128) < (1<<31-1)/8
}

// pngWhole tells whether a PNG is one still image ending at the end of the file:
// IHDR first, then chunks that stay inside the file, IDAT, and IEND last. FFmpeg
// reads an APNG (acTL) with its apng demuxer, and a second image after IEND as
// a second frame.
func pngWhole(f io.ReaderAt, size int64) bool {
	var hdr [8]byte
	off := int64(len(pngMagic))
	idat := false
	for n := 0; n < maxImageChunks; n++ {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return false
		}
		length, typ := int64(binary.BigEndian.Uint32(hdr[:4])), string(hdr[4:])
		end := off + 8 + length + 4
		if length > 1<<31-1 || end > size || (n == 0) != (typ == "IHDR") {
			return false
		}
		switch typ {
		case "IHDR", "PLTE":
		case "IDAT":
			idat = true
		case "IEND":
			return idat && end == size
		case "acTL", "fcTL", "fdAT", "CgBI": // animation; Apple's variant
			return false
		default:
			if typ[0] >= 'A' && typ[0] <= 'Z' { // an unknown critical chunk
				return false
			}
		}
		off = end
	}
	return false
}

// jpegFormat is the format ffprobe names for a JPEG file, and its duration.
// FFmpeg's probe looks at the first probeWindow bytes: when its jpeg_pipe
// probe finds the whole image there (EOI, score 51), jpeg_pipe wins; otherwise
// the image2 demuxer, which scores 50 for a name ending in an image extension,
// wins and reports one frame at 25 fps. Anything else (another extension, data
// after the image, no EOI at the end) is ffprobe's to say.
func jpegFormat(f io.ReaderAt, size int64, head []byte, path string) (string, *float64, bool) {
	var tail [2]byte
	if size < 4 || bytes.HasPrefix(head, []byte{0xff, 0xd8, 0xff, 0xf7}) { // JPEG-LS
		return "", nil, false
	}
	if _, err := f.ReadAt(tail[:], size-2); err != nil || tail != [2]byte{0xff, 0xd9} {
		return "", nil, false
	}
	if jpegProbeScore(head) == 51 {
		if size > probeWindow { // an EOI so early means more data after it
			return "", nil, false
		}
		return "jpeg_pipe", nil, true
	}
	ext := ""
	if i := strings.LastIndexByte(path, '.'); i >= 0 { // as av_match_ext reads it
		ext = strings.ToLower(path[i+1:])
	}
	if ext == "jpg" || ext == "jpeg" {
		d := 0.04
		return "image2", &d, true
	}
	return "", nil, false
}

// jpegSequential tells a sequential JPEG (baseline or extended, Huffman
// coded: SOF0 or SOF1) of at most four scans (one per component) by its
// markers, without decoding it; any other, or a malformed one, is false.
func jpegSequential(r io.Reader) bool {
	br := bufio.NewReader(r)
	var soi [2]byte
	if _, err := io.ReadFull(br, soi[:]); err != nil || soi != [2]byte{0xff, 0xd8} {
		return false
	}
	sof, scans := false, 0
	atMarker := false // a scan's data ended on the 0xff of the next marker
	for {
		if !atMarker {
			if c, err := br.ReadByte(); err != nil || c != 0xff {
				return false
			}
		}
		atMarker = false
		c, err := br.ReadByte()
		for err == nil && c == 0xff { // fill bytes
			c, err = br.ReadByte()
		}
		if err != nil {
			return false
		}
		switch {
		case c == 0xd9: // EOI
			return sof && scans >= 1
		case c == 0x01 || c >= 0xd0 && c <= 0xd7: // TEM, RST: no length
			continue
		case c == 0xc0 || c == 0xc1:
			sof = true
		case c >= 0xc2 && c <= 0xcf && c != 0xc4 && c != 0xc8 && c != 0xcc:
			return false // progressive, lossless, arithmetic or hierarchical
		case c == 0xda:
			if scans++; scans > 4 || !sof {
				return false
			}
		}
		var l [2]byte
		if _, err := io.ReadFull(br, l[:]); err != nil {
			return false
		}
		n := int(l[0])<<8 | int(l[1])
		if n < 2 {
			return false
		}
		if _, err := br.Discard(n - 2); err != nil {
			return false
		}
		if c != 0xda {
			continue
		}
		// The scan's entropy-coded data runs to the next marker that is neither
		// a stuffed 0xff00 nor a restart marker.
		for !atMarker {
			b, err := br.ReadByte()
			if err != nil {
				return false
			}
			if b != 0xff {
				continue
			}
			m, err := br.ReadByte()
			for err == nil && m == 0xff {
				m, err = br.ReadByte()
			}
			if err != nil {
				return false
			}
			if m != 0 && (m < 0xd0 || m > 0xd7) {
				br.UnreadByte() // the marker's code, read again above
				atMarker = true
			}
		}
	}
}

// jpegProbeScore is libavformat's jpeg_probe (img2dec.c) over buf, the first
// bytes of the file: 51 when it sees a whole image, less otherwise.
func jpegProbeScore(buf []byte) int {
	const (
		soi, eoi, sos, sof0 = 0xd8, 0xd9, 0xda, 0xc0
		tem, jpg, dqt       = 0x01, 0xc8, 0xdb
		app0, app1, com     = 0xe0, 0xe1, 0xfe
	)
	size := len(buf)
	// FFmpeg's probe buffer ends in AVPROBE_PADDING_SIZE zero bytes, which the
	// probe reads past the data.
	b := make([]byte, size+32)
	copy(b, buf)
	b = b[2:]
	be16 := func(i int) int { return int(b[i])<<8 | int(b[i+1]) }
	at := func(i int, s string) bool { return i+4 <= len(b) && string(b[i:i+4]) == s }
	state, gotHeader := soi, 0
	for i := 0; i < size-3; i++ {
		if b[i] != 0xff {
			continue
		}
		c := int(b[i+1])
		switch {
		case c == soi:
			return 0
		case c >= sof0 && c <= 0xc7 && c != 0xc4: // SOF0-3, SOF5-7 (not DHT)
			i += be16(i+2) + 1
			if state != soi {
				return 0
			}
			state = sof0
		case c == sos:
			i += be16(i+2) + 1
			if state != sof0 && state != sos {
				return 0
			}
			state = sos
		case c == eoi:
			if state != sos {
				return 0
			}
			state = eoi
		case c == dqt || c == app0 || c == app1 || (c > app1 && c <= 0xef) || c == com:
			// The C falls through from DQT and APP0 to APP1's test.
			if (c == dqt || c == app0) && at(i+4, "JFIF") {
				gotHeader = 1
			}
			if (c == dqt || c == app0 || c == app1) && at(i+4, "Exif") {
				gotHeader = 1
			}
			i += be16(i+2) + 1
		default:
			if (c > tem && c < sof0) || c == jpg {
				return 0
			}
		}
	}
	switch state {
	case eoi:
		return 50 + 1 // AVPROBE_SCORE_EXTENSION + 1
	case sos:
		return 50/2 + gotHeader
	}
	return 50/8 + 1
}

// webpStill tells whether a WebP file is one still image: a RIFF that ends at the
// end of the file, no animation (FFmpeg 5.1 reads none and reports 0×0; later
// versions may).
func webpStill(f io.ReaderAt, size int64) bool {
	var hdr [8]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil || int64(binary.LittleEndian.Uint32(hdr[4:]))+8 != size {
		return false
	}
	off := int64(12)
	for n := 0; n < maxImageChunks && off < size; n++ {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return false
		}
		typ, length := string(hdr[:4]), int64(binary.LittleEndian.Uint32(hdr[4:]))
		switch typ {
		case "ANIM", "ANMF":
			return false
		case "VP8X":
			var flags [1]byte
			if _, err := f.ReadAt(flags[:], off+8); err != nil || flags[0]&0x02 != 0 {
				return false
			}
		}
		off += 8 + length + length&1
		if off > size {
			return false
		}
	}
	return off == size
}
