package runner

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/Eyevinn/mp4ff/aac"
	"github.com/Eyevinn/mp4ff/bits"
	"github.com/Eyevinn/mp4ff/mp4"
	mj "github.com/mediajobs/mediajobs"
)

// The in-process probe of MP4 and MOV outputs (H.264 video, AAC-LC audio: what
// ffmpeg writes by default), as ffprobe describes them (the corpus test checks
// it against the FFmpeg it runs, 5.1 on Debian 12):
// format "mov,mp4,m4a,3gp,3g2,mj2", the duration of the movie header (mvhd),
// and one stream per track. Boxes are decoded with github.com/Eyevinn/mp4ff.
// Anything else goes to ffprobe: probeMP4 answers ok only when
//   - the file is ftyp (a known brand), then only moov, mdat and free space,
//     tiling the file; one moov of at most mp4ProbeMaxMoov bytes; not
//     fragmented (no mvex: FFmpeg then takes the duration from the fragments);
//   - the movie has a duration, and each track is a video track of one avc1/avc3
//     entry or a sound track of one mp4a entry, with samples; no cover art
//     (FFmpeg makes it a stream), no track references (chapters, timecode);
//   - the H.264 size that FFmpeg's decoder would report (its one SPS, cropped)
//     is the sample entry's, and the first sample carries no other SPS;
//   - the AAC is plain LC at 32 kHz or more, mono or stereo: the rate and
//     channels ffprobe reports come from FFmpeg's decoder, which doubles them
//     for SBR and PS.
// What stays ffprobe's alone: a file whose first AAC frames do not decode
// (corrupt sample data, which no muxer writes) may have ffprobe report the
// sample entry's channel count, not the esds's (TestProbeMP4Mutations).
// The moov is read into memory, bounded, and every box of it is checked to lie
// inside its parent before mp4ff decodes any (mp4ff allocates what a table's
// count says); table boxes are not decoded at all. The H.264 SPS is read here,
// with FFmpeg's own bounds.

const (
	// mp4ProbeMaxMoov bounds the moov read into memory (about an hour of
	// 30 fps video with its audio takes 2 MB).
	mp4ProbeMaxMoov = 16 << 20
	// mp4ProbeMaxBoxes bounds the boxes walked, at the top level and in moov.
	mp4ProbeMaxBoxes = 4096
	// mp4ProbeMaxTracks bounds the tracks described here.
	mp4ProbeMaxTracks = 16
	// mp4ProbeMaxNALUs bounds the NAL units of the first sample looked at.
	mp4ProbeMaxNALUs = 256
	// movFormat is FFmpeg's name for its mov demuxer.
	movFormat = "mov,mp4,m4a,3gp,3g2,mj2"
)

// mp4Brands are the major brands answered here: what FFmpeg's muxers write for
// .mp4, .mov and .m4a/.m4v.
var mp4Brands = map[string]bool{"isom": true, "iso2": true, "iso4": true, "iso5": true, "iso6": true,
	"mp41": true, "mp42": true, "qt  ": true, "M4A ": true, "M4V ": true, "avc1": true}

// mp4Box is one box: its type and its payload (after the header).
type mp4Box struct {
	typ  string
	body []byte
}

// mp4Children splits b into boxes that tile it exactly; budget counts down the
// boxes walked.
func mp4Children(b []byte, budget *int) ([]mp4Box, bool) {
	var out []mp4Box
	for len(b) > 0 {
		if *budget--; *budget < 0 || len(b) < 8 {
			return nil, false
		}
		size, hdr := uint64(binary.BigEndian.Uint32(b)), uint64(8)
		if size == 1 {
			if len(b) < 16 {
				return nil, false
			}
			size, hdr = binary.BigEndian.Uint64(b[8:]), 16
		}
		if size < hdr || size > uint64(len(b)) {
			return nil, false
		}
		out = append(out, mp4Box{string(b[4:8]), b[hdr:size]})
		b = b[size:]
	}
	return out, true
}

// probeMP4 describes the file rel of the job's directory workDir as ffprobe
// would, if it is an MP4 or MOV that can be described here for certain.
func probeMP4(workDir, rel string) (p *mj.Probe, ok bool) {
	if !inProcessProbe {
		return nil, false
	}
	defer func() {
		if recover() != nil { // a decoder's bug is no runner crash
			p, ok = nil, false
		}
	}()
	f, size, err := openProbed(workDir, rel, math.MaxInt64)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	moov, ok := mp4Moov(f, size)
	if !ok {
		return nil, false
	}
	return mp4Describe(f, size, moov)
}

// mp4Moov walks the top-level boxes of f and returns the moov's payload.
func mp4Moov(f io.ReaderAt, size int64) ([]byte, bool) {
	var hdr [16]byte
	var moov []byte
	var off int64
	for n := 0; off < size; n++ {
		if n >= mp4ProbeMaxBoxes || size-off < 8 {
			return nil, false
		}
		if _, err := f.ReadAt(hdr[:8], off); err != nil {
			return nil, false
		}
		boxSize, hl, typ := int64(binary.BigEndian.Uint32(hdr[:4])), int64(8), string(hdr[4:8])
		if boxSize == 1 {
			if _, err := f.ReadAt(hdr[8:16], off+8); err != nil {
				return nil, false
			}
			u := binary.BigEndian.Uint64(hdr[8:16])
			if u > math.MaxInt64 {
				return nil, false
			}
			boxSize, hl = int64(u), 16
		}
		if boxSize < hl || boxSize > size-off { // 0 (to the end of the file) included
			return nil, false
		}
		switch {
		case n == 0:
			var brand [4]byte
			if typ != "ftyp" || boxSize < hl+8 {
				return nil, false
			}
			if _, err := f.ReadAt(brand[:], off+hl); err != nil || !mp4Brands[string(brand[:])] {
				return nil, false
			}
		case typ == "moov":
			if moov != nil || boxSize-hl > mp4ProbeMaxMoov {
				return nil, false
			}
			moov = make([]byte, boxSize-hl)
			if _, err := f.ReadAt(moov, off+hl); err != nil {
				return nil, false
			}
		case typ == "mdat" || typ == "free" || typ == "skip" || typ == "wide":
		default: // moof, sidx, mfra, meta, a second ftyp, ...
			return nil, false
		}
		off += boxSize
	}
	return moov, moov != nil
}

// mp4Describe is the probe of a file whose moov payload is moov.
func mp4Describe(f io.ReaderAt, size int64, moov []byte) (*mj.Probe, bool) {
	// FFmpeg reads cover art anywhere in the moov's metadata as a stream of its
	// own; the test is by bytes, so it may send a file to ffprobe needlessly,
	// never the other way.
	if bytes.Contains(moov, []byte("covr")) {
		return nil, false
	}
	budget := mp4ProbeMaxBoxes
	top, ok := mp4Children(moov, &budget)
	if !ok {
		return nil, false
	}
	var mvhd *mp4.MvhdBox
	var traks []mp4Box
	for _, b := range top {
		switch b.typ {
		case "mvhd":
			if mvhd != nil {
				return nil, false
			}
			if mvhd, ok = mp4Decode(b).(*mp4.MvhdBox); !ok {
				return nil, false
			}
		case "trak":
			traks = append(traks, b)
		case "udta", "iods", "free", "skip":
		default: // mvex (fragments), cmov, meta, ...
			return nil, false
		}
	}
	if mvhd == nil || len(traks) == 0 || len(traks) > mp4ProbeMaxTracks {
		return nil, false
	}
	d, ok := mp4Duration(mvhd.Duration, mvhd.Timescale)
	if !ok {
		return nil, false
	}
	p := &mj.Probe{Format: movFormat, DurationSeconds: &d, Streams: []mj.Stream{}}
	for _, t := range traks {
		s, ok := mp4Track(f, size, t.body, &budget)
		if !ok {
			return nil, false
		}
		p.Streams = append(p.Streams, s)
	}
	return p, true
}

// mp4Duration is the format duration ffprobe prints for a movie header's
// duration: mov_read_mvhd rescales it to microseconds (av_rescale, to the
// nearest), ffprobe prints that in seconds with "%f", and runFFprobe parses
// what it printed.
func mp4Duration(duration uint64, timescale uint32) (float64, bool) {
	if timescale == 0 || duration == 0 || duration >= 1<<40 {
		return 0, false
	}
	us := (duration*1_000_000 + uint64(timescale)/2) / uint64(timescale)
	d, err := strconv.ParseFloat(fmt.Sprintf("%f", float64(us)*(1.0/1_000_000)), 64)
	return d, err == nil && d > 0
}

// mp4Decode decodes one box with mp4ff, from a buffer that holds exactly it.
func mp4Decode(b mp4Box) mp4.Box {
	buf := make([]byte, 8+len(b.body))
	binary.BigEndian.PutUint32(buf, uint32(len(buf)))
	copy(buf[4:], b.typ)
	copy(buf[8:], b.body)
	sr := bits.NewFixedSliceReader(buf)
	box, err := mp4.DecodeBoxSR(0, sr)
	if err != nil || sr.NrRemainingBytes() != 0 {
		return nil
	}
	return box
}

// mp4Find is the only child of type typ of the box with payload b.
func mp4Find(b []byte, typ string, budget *int) ([]byte, bool) {
	children, ok := mp4Children(b, budget)
	if !ok {
		return nil, false
	}
	var found []byte
	n := 0
	for _, c := range children {
		if c.typ == typ {
			found, n = c.body, n+1
		}
	}
	return found, n == 1
}

// mp4Track describes one trak.
func mp4Track(f io.ReaderAt, size int64, trak []byte, budget *int) (mj.Stream, bool) {
	children, ok := mp4Children(trak, budget)
	if !ok {
		return mj.Stream{}, false
	}
	for _, c := range children {
		switch c.typ {
		case "tkhd", "edts", "mdia", "udta":
		default: // tref (chapters, timecode), meta, ...
			return mj.Stream{}, false
		}
	}
	mdia, ok := mp4Find(trak, "mdia", budget)
	if !ok {
		return mj.Stream{}, false
	}
	// FFmpeg refuses a media header of a version it does not know.
	if mdhd, ok := mp4Find(mdia, "mdhd", budget); !ok || len(mdhd) < 24 || mdhd[0] > 1 || mdhd[0] == 1 && len(mdhd) < 36 {
		return mj.Stream{}, false
	}
	hdlrBody, ok := mp4Find(mdia, "hdlr", budget)
	if !ok {
		return mj.Stream{}, false
	}
	hdlr, ok := mp4Decode(mp4Box{"hdlr", hdlrBody}).(*mp4.HdlrBox)
	if !ok {
		return mj.Stream{}, false
	}
	minf, ok := mp4Find(mdia, "minf", budget)
	if !ok || !mp4Headers(trak, minf, budget) {
		return mj.Stream{}, false
	}
	stbl, ok := mp4Find(minf, "stbl", budget)
	if !ok {
		return mj.Stream{}, false
	}
	if !mp4Tables(stbl, budget) {
		return mj.Stream{}, false
	}
	entry, ok := mp4SampleEntry(stbl, budget)
	if !ok {
		return mj.Stream{}, false
	}
	offset, length, ok := mp4FirstSample(stbl, budget)
	if !ok || offset < 0 || length <= 0 || offset > size-length {
		return mj.Stream{}, false
	}
	switch {
	case hdlr.HandlerType == "vide" && (entry.typ == "avc1" || entry.typ == "avc3"):
		return mp4AVC(f, entry, offset, length)
	case hdlr.HandlerType == "soun" && entry.typ == "mp4a":
		return mp4AAC(entry, budget)
	}
	return mj.Stream{}, false
}

// mp4SampleEntry is the one sample entry of an stbl's stsd.
func mp4SampleEntry(stbl []byte, budget *int) (mp4Box, bool) {
	stsd, ok := mp4Find(stbl, "stsd", budget)
	if !ok || len(stsd) < 8 || binary.BigEndian.Uint32(stsd[4:8]) != 1 {
		return mp4Box{}, false
	}
	entries, ok := mp4Children(stsd[8:], budget)
	if !ok || len(entries) != 1 {
		return mp4Box{}, false
	}
	return entries[0], true
}

// mp4FirstSample is where a track's first sample lies: its first chunk's
// offset (stco or co64) and its size (stsz).
func mp4FirstSample(stbl []byte, budget *int) (offset, length int64, ok bool) {
	stsz, ok := mp4Find(stbl, "stsz", budget)
	if !ok || len(stsz) < 12 {
		return 0, 0, false
	}
	uniform, count := binary.BigEndian.Uint32(stsz[4:]), binary.BigEndian.Uint32(stsz[8:])
	if count == 0 {
		return 0, 0, false
	}
	length = int64(uniform)
	if uniform == 0 {
		if len(stsz) < 16 {
			return 0, 0, false
		}
		length = int64(binary.BigEndian.Uint32(stsz[12:]))
	}
	if stco, ok := mp4Find(stbl, "stco", budget); ok && len(stco) >= 12 && binary.BigEndian.Uint32(stco[4:]) > 0 {
		return int64(binary.BigEndian.Uint32(stco[8:])), length, true
	}
	if co64, ok := mp4Find(stbl, "co64", budget); ok && len(co64) >= 16 && binary.BigEndian.Uint32(co64[4:]) > 0 {
		o := binary.BigEndian.Uint64(co64[8:])
		return int64(o), length, o <= math.MaxInt64
	}
	return 0, 0, false
}

// mp4AVC describes an H.264 track: the size FFmpeg's decoder reports is its
// SPS's, cropped; when the sample entry says another, FFmpeg may take either
// (h264_slice.c's "container cropping"), so such a file is ffprobe's.
func mp4AVC(f io.ReaderAt, entry mp4Box, offset, length int64) (mj.Stream, bool) {
	vse, ok := mp4Decode(entry).(*mp4.VisualSampleEntryBox)
	if !ok || vse.AvcC == nil || len(vse.AvcC.SPSnalus) != 1 {
		return mj.Stream{}, false
	}
	sps := vse.AvcC.SPSnalus[0]
	w, h, ok := h264Size(sps)
	if !ok || w != int(vse.Width) || h != int(vse.Height) {
		return mj.Stream{}, false
	}
	// An SPS in the first sample replaces the avcC's when it is decoded.
	// The NAL units' length field is the avcC's (mp4ff keeps no field for it).
	if len(entry.body) < 78 {
		return mj.Stream{}, false
	}
	budget := mp4ProbeMaxBoxes
	avcC, ok := mp4Find(entry.body[78:], "avcC", &budget)
	if !ok || len(avcC) < 5 {
		return mj.Stream{}, false
	}
	n := int(avcC[4]&3) + 1
	if n == 3 {
		return mj.Stream{}, false
	}
	var lenBuf [5]byte
	for pos, i := int64(0), 0; pos < length; i++ {
		if i >= mp4ProbeMaxNALUs || length-pos < int64(n)+1 {
			return mj.Stream{}, false
		}
		if _, err := f.ReadAt(lenBuf[:n+1], offset+pos); err != nil {
			return mj.Stream{}, false
		}
		var l int64
		for _, c := range lenBuf[:n] {
			l = l<<8 | int64(c)
		}
		if l == 0 || l > length-pos-int64(n) {
			return mj.Stream{}, false
		}
		if lenBuf[n]&0x1f == 7 { // SPS
			if l != int64(len(sps)) {
				return mj.Stream{}, false
			}
			in := make([]byte, l)
			if _, err := f.ReadAt(in, offset+pos+int64(n)); err != nil || !bytes.Equal(in, sps) {
				return mj.Stream{}, false
			}
		}
		pos += int64(n) + l
	}
	return mj.Stream{Type: "video", Codec: "h264", Width: w, Height: h}, true
}

// h264Size is the picture size of an H.264 SPS NAL unit as FFmpeg's decoder
// reports it, for the SPSs whose answer is plain: progressive, no scaling
// matrices, cropped only on the right and at the bottom, within FFmpeg's
// bounds (h264_ps.c).
func h264Size(nal []byte) (w, h int, ok bool) {
	if len(nal) < 4 || nal[0]&0x9f != 0x07 { // forbidden bit 0, type 7
		return 0, 0, false
	}
	// The RBSP: the emulation prevention bytes (00 00 03) dropped.
	rbsp := make([]byte, 0, len(nal))
	zeros := 0
	for _, c := range nal[1:] {
		if zeros >= 2 && c == 3 {
			zeros = 0
			continue
		}
		if c == 0 {
			zeros++
		} else {
			zeros = 0
		}
		rbsp = append(rbsp, c)
	}
	r := &expGolomb{b: rbsp}
	profile := r.bits(8)
	r.bits(16) // constraint flags, level
	if r.ue() > 31 {
		return 0, 0, false
	}
	chroma := uint64(1)
	switch profile {
	case 100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135:
		if chroma = r.ue(); chroma > 3 {
			return 0, 0, false
		}
		if chroma == 3 && r.bits(1) == 1 { // separate colour planes
			return 0, 0, false
		}
		luma, chromaDepth := r.ue(), r.ue()
		if luma > 6 || luma != chromaDepth {
			return 0, 0, false
		}
		r.bits(1)           // qpprime_y_zero_transform_bypass
		if r.bits(1) == 1 { // scaling matrices
			return 0, 0, false
		}
	}
	if r.ue() > 12 { // log2_max_frame_num_minus4
		return 0, 0, false
	}
	switch r.ue() { // pic_order_cnt_type
	case 0:
		if r.ue() > 12 {
			return 0, 0, false
		}
	case 2:
	default: // 1: a cycle to read; others invalid
		return 0, 0, false
	}
	if r.ue() > 16 { // max_num_ref_frames
		return 0, 0, false
	}
	r.bits(1) // gaps_in_frame_num_allowed
	mbw, mbh := r.ue()+1, r.ue()+1
	if mbw > 1<<12 || mbh > 1<<12 {
		return 0, 0, false
	}
	if r.bits(1) != 1 { // frame_mbs_only: interlaced is ffprobe's
		return 0, 0, false
	}
	r.bits(1) // direct_8x8_inference
	w, h = int(mbw*16), int(mbh*16)
	if r.bits(1) == 1 { // frame_cropping
		left, right, top, bottom := r.ue(), r.ue(), r.ue(), r.ue()
		ux, uy := uint64(2), uint64(2)
		switch chroma {
		case 0, 3:
			ux, uy = 1, 1
		case 2:
			uy = 1
		}
		if left != 0 || top != 0 || right >= mbw*16/ux || bottom >= mbh*16/uy {
			return 0, 0, false
		}
		w -= int(right * ux)
		h -= int(bottom * uy)
	}
	r.bits(1) // vui_parameters_present: the rest is no part of the size
	if r.err || !ffmpegSizeOK(w, h) {
		return 0, 0, false
	}
	return w, h, true
}

// expGolomb reads bits and Exp-Golomb codes of an RBSP; err is set, and
// zeros read, past its end or for a code longer than 32 bits.
type expGolomb struct {
	b   []byte
	pos int
	err bool
}

func (r *expGolomb) bits(n int) uint64 {
	var v uint64
	for range n {
		if r.pos >= len(r.b)*8 {
			r.err = true
			return 0
		}
		v = v<<1 | uint64(r.b[r.pos/8]>>(7-r.pos%8)&1)
		r.pos++
	}
	return v
}

func (r *expGolomb) ue() uint64 {
	zeros := 0
	for r.bits(1) == 0 {
		if zeros++; zeros > 31 || r.err {
			r.err = true
			return 0
		}
	}
	return 1<<zeros - 1 + r.bits(zeros)
}

// mp4AAC describes an AAC track from its esds: an ISO sample entry holds it,
// a QuickTime one (version 1 or 2) holds it, after more fields, in a wave box.
func mp4AAC(entry mp4Box, budget *int) (mj.Stream, bool) {
	b := entry.body
	if len(b) < 28 {
		return mj.Stream{}, false
	}
	skip := 28 // reserved, data reference, version ... sample rate
	switch binary.BigEndian.Uint16(b[8:]) {
	case 0:
	case 1:
		skip += 16
	case 2:
		skip += 36
	default:
		return mj.Stream{}, false
	}
	if len(b) < skip {
		return mj.Stream{}, false
	}
	children, ok := mp4Children(b[skip:], budget)
	if !ok {
		return mj.Stream{}, false
	}
	var esds, layout []byte
	for _, c := range children {
		switch c.typ {
		case "esds":
			if esds != nil {
				return mj.Stream{}, false
			}
			esds = c.body
		case "wave":
			wave, ok := mp4Children(c.body, budget)
			if !ok {
				return mj.Stream{}, false
			}
			for _, w := range wave {
				if w.typ == "esds" {
					if esds != nil {
						return mj.Stream{}, false
					}
					esds = w.body
				}
			}
		case "chan": // a QuickTime channel layout, as FFmpeg writes it: below
			if layout != nil || len(c.body) < 12 {
				return mj.Stream{}, false
			}
			layout = c.body
		}
	}
	if esds == nil {
		return mj.Stream{}, false
	}
	box, ok := mp4Decode(mp4Box{"esds", esds}).(*mp4.EsdsBox)
	if !ok || box.DecConfigDescriptor == nil || box.DecConfigDescriptor.ObjectType != 0x40 ||
		box.DecConfigDescriptor.DecSpecificInfo == nil {
		return mj.Stream{}, false
	}
	cfg := box.DecConfigDescriptor.DecSpecificInfo.DecConfig
	asc, err := aac.DecodeAudioSpecificConfig(bytes.NewReader(cfg))
	if err != nil || asc.ObjectType != aac.AAClc || asc.SBRPresentFlag || asc.PSPresentFlag ||
		asc.ExtensionFrequency != 0 || (asc.ChannelConfiguration != 1 && asc.ChannelConfiguration != 2) {
		return mj.Stream{}, false
	}
	noSBR, ok := aacPlainLC(cfg)
	if !ok || (!noSBR && asc.SamplingFrequency < 32000) {
		return mj.Stream{}, false
	}
	// A channel layout that says another count might be what FFmpeg reports
	// when its decoder does not settle it: only plain mono or stereo, agreeing
	// with the esds, and no descriptions, is answered here.
	if layout != nil {
		tag := binary.BigEndian.Uint32(layout[4:])
		if tag != 100<<16|1 && tag != 101<<16|2 || tag&0xffff != uint32(asc.ChannelConfiguration) ||
			len(layout) < 16 || binary.BigEndian.Uint32(layout[12:]) != 0 {
			return mj.Stream{}, false
		}
	}
	return mj.Stream{Type: "audio", Codec: "aac", SampleRate: asc.SamplingFrequency, Channels: int(asc.ChannelConfiguration)}, true
}

// aacPlainLC tells an AudioSpecificConfig of AAC-LC, 1024 samples a frame, in
// one of two forms: its two bytes alone, or followed by the sync extension
// saying that there is no SBR (FFmpeg's encoder writes that: noSBR). Without
// it, FFmpeg's decoder doubles the rate of a stream that turns out to carry SBR
// (implicit signalling, usual below 32 kHz), so only those are answered here.
// mp4ff reads the first fields and ignores what follows; FFmpeg reads what
// follows too.
func aacPlainLC(cfg []byte) (noSBR, ok bool) {
	if len(cfg) < 2 || cfg[0]>>3 != 2 || (cfg[0]&7)<<1|cfg[1]>>7 == 15 || cfg[1]&7 != 0 {
		return false, false // not LC, an explicit rate, or a GASpecificConfig of more than defaults
	}
	switch {
	case len(cfg) == 2:
		return false, true
	case len(cfg) == 5 && cfg[2] == 0x56 && cfg[3] == 0xe5 && cfg[4] == 0x00:
		// 0x2b7 (11 bits), AOT 5 (SBR, 5 bits), sbrPresentFlag 0, padding.
		return true, true
	}
	return false, false
}

// mp4Tables tells whether each sample table of an stbl is as long as its count
// says: FFmpeg refuses the whole file when one is short, and one with a count
// out of all proportion is a crafted file's.
func mp4Tables(stbl []byte, budget *int) (ok bool) {
	children, ok := mp4Children(stbl, budget)
	if !ok {
		return false
	}
	entry := map[string]uint64{"stts": 8, "stco": 4, "co64": 8, "stss": 4, "ctts": 8}
	var chunks, lastFirst uint32
	defer func() { ok = ok && lastFirst >= 1 && lastFirst <= chunks }()
	for _, c := range children {
		n := uint64(len(c.body))
		switch c.typ {
		case "stsz":
			if n < 12 {
				return false
			}
			count := uint64(binary.BigEndian.Uint32(c.body[8:]))
			if binary.BigEndian.Uint32(c.body[4:]) != 0 {
				break
			}
			if n != 12+4*count {
				return false
			}
			for i := uint64(12); i < n; i += 4 {
				if c.body[i] >= 0x80 { // FFmpeg refuses a negative size
					return false
				}
			}
		case "stsc":
			// One sample entry; runs of chunks numbered from 1, increasing,
			// none past the last chunk (FFmpeg repairs or refuses others).
			if n < 8 || n != 8+12*uint64(binary.BigEndian.Uint32(c.body[4:])) || n == 8 {
				return false
			}
			prev := uint32(0)
			for i := uint64(8); i < n; i += 12 {
				first, count, id := binary.BigEndian.Uint32(c.body[i:]), binary.BigEndian.Uint32(c.body[i+4:]), binary.BigEndian.Uint32(c.body[i+8:])
				if (i == 8) != (first == 1) || first <= prev || count < 1 || id != 1 {
					return false
				}
				prev = first
			}
			lastFirst = prev
		case "stts", "stco", "co64", "stss", "ctts":
			if n < 8 || n != 8+entry[c.typ]*uint64(binary.BigEndian.Uint32(c.body[4:])) || n == 8 && c.typ != "stss" && c.typ != "ctts" {
				return false
			}
			if c.typ == "stco" || c.typ == "co64" {
				chunks = binary.BigEndian.Uint32(c.body[4:])
			}
		case "stsd", "sdtp", "sgpd", "sbgp", "cslg":
		default: // stz2, padding, ... : ffprobe's
			return false
		}
	}
	return true
}

// mp4Headers tells whether the boxes of a trak and its minf that FFmpeg reads
// as lists (an edit list, data references) hold what they say: FFmpeg stops
// reading a track whose lists run past their box.
func mp4Headers(trak, minf []byte, budget *int) bool {
	children, ok := mp4Children(minf, budget)
	if !ok {
		return false
	}
	for _, c := range children {
		switch c.typ {
		case "vmhd", "smhd", "hdlr", "stbl":
		case "dinf":
			dref, ok := mp4Find(c.body, "dref", budget)
			if !ok || len(dref) < 8 {
				return false
			}
			refs, ok := mp4Children(dref[8:], budget)
			if !ok || len(refs) != int(binary.BigEndian.Uint32(dref[4:])) {
				return false
			}
		default:
			return false
		}
	}
	if edts, ok := mp4Find(trak, "edts", budget); ok {
		elst, ok := mp4Find(edts, "elst", budget)
		if !ok || len(elst) < 8 {
			return false
		}
		entry := uint64(12)
		if elst[0] == 1 {
			entry = 20
		}
		if uint64(len(elst)) != 8+entry*uint64(binary.BigEndian.Uint32(elst[4:])) {
			return false
		}
	}
	return true
}
