package chunked

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Chunks travel between steps as NUT files: NUT keeps the source's time base
// and timestamps exactly and carries every codec the encoders make.
const chunkFormat = "nut"

// SplitArgs is the argv that stream-copies chunk c of the source (video only,
// original timestamps) into out: exactly c.Packets packets in decode order,
// from the chunk's keyframe on.
func SplitArgs(src *Source, cmd *Command, c Chunk, out string) []string {
	a := []string{"-y"}
	a = append(a, flatten(cmd.InputOpts, func(o Opt) bool { return !isDecoderOption(o) })...)
	a = append(a, "-copyts")
	skip := []string{}
	if c.Index > 0 {
		// Seek to a time (absolute: -seek_timestamp) between the frame before
		// and the keyframe. The demuxer lands on a keyframe at or before it
		// (ffmpeg seeks a little earlier still for streams with B-frames and
		// formats indexed by decode time), and -copypriorss 0 drops packets
		// up to the first keyframe shown at or after it: the chunk's.
		// With pre-roll, the keyframe is the one before the pre-roll's frames.
		from := c.TrimFrom
		if c.PreRoll > 0 {
			from = c.SplitFrom
		}
		a = append(a, "-seek_timestamp", "1", "-ss", seconds(from))
		skip = []string{"-copypriorss", "0"}
	}
	a = append(a, "-i", src.Path, "-map", fmt.Sprintf("0:%d", src.VideoIndex), "-c", "copy")
	a = append(a, skip...)
	return append(a, "-avoid_negative_ts", "disabled", "-frames:v", fmt.Sprint(c.Packets), "-f", chunkFormat, out)
}

// EncodeArgs is the argv that encodes chunk c (SplitArgs's file in) into out
// with the user's video options: the chunk's frames only (a trim between
// frames, before the user's filters), the timestamps kept, no audio,
// subtitles or data, and a closed keyframe at its first frame (encoderArgs).
func EncodeArgs(cmd *Command, c Chunk, in, out string) []string {
	a := []string{"-y"}
	a = append(a, flatten(cmd.Global, keepGlobal)...)
	a = append(a, "-copyts")
	a = append(a, flatten(cmd.InputOpts, isDecoderOption)...)
	a = append(a, "-i", in, "-map", "0:v:0")
	var keys string
	for _, o := range cmd.OutputOpts {
		switch {
		case o.Name == "force_key_frames":
			keys = o.Value
			continue
		case o.Name == "map" || o.Name == "c" || o.Name == "filter" || o.Name == "fps_mode" ||
			o.Name == "x264-params" || o.Name == "x265-params" || o.Name == "svtav1-params" || o.Name == "x264opts":
			continue
		case isMuxerOption(o.Name) || isVideoLess(o):
			continue
		}
		a = append(a, o.words()...)
	}
	// With pre- and post-roll (Source.Roll) the graph gets the frames
	// around the chunk too, and a trim by frame count after it keeps the
	// chunk's own: however the graph re-times them (setpts=PTS-STARTPTS),
	// it keeps one frame for each.
	from, to := c.TrimFrom, c.TrimTo
	if c.Rolls() {
		from, to = c.RollFrom, c.RollTo
	}
	trim := "trim="
	if c.Index > 0 {
		trim += "start=" + seconds(from)
	}
	if !c.Last {
		if c.Index > 0 {
			trim += ":"
		}
		trim += "end=" + seconds(to)
	}
	if c.Index == 0 && c.Last {
		trim = "" // the whole source: nothing to trim
	}
	// ffmpeg rotates the source's pictures before the user's graph; the chunk
	// has no display matrix left to rotate by, so the encode says it.
	if rot := autorotateFilter(cmd, c.Rotation); rot != "" {
		trim = strings.TrimPrefix(trim+","+rot, ",")
	}
	graph := cmd.VideoFilter
	switch {
	case trim == "":
	case graph == "":
		graph = trim
	default:
		labels, rest := leadingLabels(graph)
		graph = labels + trim + "," + rest
	}
	if c.Rolls() {
		keep := fmt.Sprintf("trim=start_frame=%d:end_frame=%d", c.PreRoll, c.PreRoll+c.Frames)
		if g, ok := appendFilter(graph, keep); ok {
			graph = g
		} // else Parse refused the command
	}
	if graph != "" {
		a = append(a, "-filter:v", graph)
	}
	a = append(a, "-an", "-sn", "-dn", "-c:v", cmd.Encoder, "-fps_mode", "passthrough", "-enc_time_base", "-1")
	// The chunk's first frame is a keyframe (every encoder starts with one);
	// forcing it says so, and the user's own times are kept after it.
	if keys == "" {
		a = append(a, "-force_key_frames", "expr:eq(n,0)")
	} else {
		a = append(a, "-force_key_frames", seconds(c.TrimFrom)+","+keys)
	}
	a = append(a, encoderArgs(cmd)...)
	return append(a, "-f", chunkFormat, out)
}

// autorotateFilter is the filter ffmpeg inserts before the user's graph to
// apply a display rotation (degrees, as ffprobe reports it), as
// fftools/ffmpeg_filter.c does: "" when cmd turns autorotation off or there is
// nothing to rotate. Probe admits multiples of 90° alone.
func autorotateFilter(cmd *Command, rotation float64) string {
	if !cmd.Autorotates() {
		return ""
	}
	// ffmpeg's angle is the matrix's, negated, in [0, 360).
	switch theta := math.Mod(math.Mod(-math.Round(rotation), 360)+360, 360); theta {
	case 90:
		return "transpose=clock"
	case 180:
		return "hflip,vflip"
	case 270:
		return "transpose=cclock"
	}
	return ""
}

// Autorotates tells whether ffmpeg applies the input's display rotation when
// it decodes: unless -noautorotate (or -autorotate 0) is given.
func (cmd *Command) Autorotates() bool {
	on := true
	for _, o := range cmd.InputOpts {
		switch {
		case o.Name == "noautorotate":
			on = false
		case o.Name == "autorotate":
			v, err := strconv.ParseFloat(o.Value, 64)
			on = !o.HasValue || err != nil || v != 0
		}
	}
	return on
}

// CheckSource refuses what the command cannot do in chunks with this source:
// keep its display matrix with autorotation off (-noautorotate keeps the
// matrix in a single encode; the chunks' NUT files lose it).
func (cmd *Command) CheckSource(src *Source) error {
	if src.Rotation != 0 && !cmd.Autorotates() {
		return refuse("-noautorotate", fmt.Sprintf("keeps the source's rotation metadata (%g°) in one encode, and chunked encoding cannot carry it through its chunks yet; let ffmpeg rotate the pictures (drop -noautorotate), or set the rotation in a job of its own after", src.Rotation))
	}
	// Chunked encoding encodes one video stream, src.VideoIndex; the aux
	// step drops every other (-vn). One encode would keep or pick another.
	const fix = "; keep the one video stream in a job of its own first (-map 0:%d -c copy), then split that"
	if len(cmd.Maps) == 0 && len(src.OtherVideos) > 0 {
		return refuse("the source", fmt.Sprintf("has %d video streams, and without -map ffmpeg picks one by resolution, which need not be the one chunked encoding encodes (stream %d)"+fix, 1+len(src.OtherVideos), src.VideoIndex, src.VideoIndex))
	}
	for _, m := range cmd.Maps {
		mm := mapRe.FindStringSubmatch(m)
		if strings.HasPrefix(m, "-") || mm == nil {
			continue
		}
		var keeps []int // the other video streams map m selects
		switch {
		case mm[5] != "":
			n, _ := strconv.Atoi(mm[5])
			if slices.Contains(src.OtherVideos, n) || slices.Contains(src.Pictures, n) {
				keeps = []int{n}
			}
		case mm[2] == "" || mm[2] == "v" && mm[4] == "":
			keeps = append(slices.Clone(src.OtherVideos), src.Pictures...)
		case mm[2] == "V" && mm[4] == "":
			keeps = src.OtherVideos
		case mm[2] == "v" && mm[4] == "0":
			for _, p := range src.Pictures {
				if p < src.VideoIndex {
					keeps = []int{p} // 0:v:0 is the attached picture before the video
				}
			}
		}
		if len(keeps) > 0 {
			return refuse("-map "+m, fmt.Sprintf("keeps video stream %d besides stream %d (another video, or an attached picture such as cover art), and chunked encoding encodes one video stream alone"+fix, keeps[0], src.VideoIndex, src.VideoIndex))
		}
	}
	return nil
}

// encoderArgs closes every GOP for the chunk's encoder, merged into the
// user's own parameter list (ffmpeg keeps only the last one given):
//   - x264 and x265: open-gop off, and a forced keyframe is an IDR;
//   - SVT-AV1: key frames of the closed kind (irefresh-type=2);
//   - VP9: a keyframe is always closed; nothing to add.
func encoderArgs(cmd *Command) []string {
	switch cmd.Encoder {
	case "libx264":
		return []string{"-forced-idr", "1", "-x264-params", mergeParams(cmd.param("x264-params"), "open-gop", "0")}
	case "libx265":
		return []string{"-forced-idr", "1", "-x265-params", mergeParams(cmd.param("x265-params"), "open-gop", "0")}
	case "libsvtav1":
		return []string{"-svtav1-params", mergeParams(cmd.param("svtav1-params"), "irefresh-type", "2")}
	}
	if p := cmd.param(cmd.Encoder + "-params"); p != "" {
		return []string{"-" + cmd.Encoder + "-params", p}
	}
	return nil
}

// param is the value of the last output option name.
func (cmd *Command) param(name string) string {
	v := ""
	for _, o := range cmd.OutputOpts {
		if o.Name == name {
			v = o.Value
		}
	}
	if name == "x264-params" { // -x264opts is the same list, read first
		for _, o := range cmd.OutputOpts {
			if o.Name == "x264opts" {
				v = strings.Trim(o.Value+":"+v, ":")
			}
		}
	}
	return v
}

// mergeParams sets key=val in a key=value:key=value list, replacing the key
// however it is spelt (open_gop, open-gop, no-open-gop).
func mergeParams(list, key, val string) string {
	norm := func(k string) string { return strings.ReplaceAll(strings.ToLower(k), "_", "-") }
	var out []string
	for _, p := range strings.Split(list, ":") {
		k, _, _ := strings.Cut(p, "=")
		if p == "" || norm(k) == norm(key) || norm(k) == "no-"+norm(key) {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(append(out, key+"="+val), ":")
}

// AuxArgs is the argv that encodes everything but the video once, from the
// whole source: the user's command with -vn, its audio options, subtitles,
// metadata and chapters, into out (a file of the user's container).
func AuxArgs(cmd *Command, out string) []string {
	a := []string{"-y"}
	a = append(a, flatten(cmd.Global, keepGlobal)...)
	a = append(a, flatten(cmd.InputOpts, nil)...)
	a = append(a, "-i", cmd.Input)
	for _, o := range cmd.OutputOpts {
		if (o.Name == "filter" || o.Name == "c") && appliesToVideo(o.Spec) && specType(o.Spec) != 0 {
			continue
		}
		if o.Name == "force_key_frames" || o.Name == "fps_mode" {
			continue
		}
		a = append(a, o.words()...)
	}
	return append(a, "-vn", out)
}

// NeedsAux tells whether the command's output has streams besides the video
// that AuxArgs must make: the source has some, and the command does not drop
// them all.
func (cmd *Command) NeedsAux(src *Source) bool {
	if src.Others == 0 {
		return false
	}
	an, sn, dn := false, false, false
	for _, o := range cmd.OutputOpts {
		switch o.Name {
		case "an":
			an = true
		case "sn":
			sn = true
		case "dn":
			dn = true
		}
	}
	if len(cmd.Maps) == 0 {
		return src.HasAudio && !an // ffmpeg's default picks audio; subtitles only by -map
	}
	for _, m := range cmd.Maps {
		mm := mapRe.FindStringSubmatch(m)
		if strings.HasPrefix(m, "-") || mm == nil {
			continue
		}
		switch mm[2] {
		case "v", "V":
		case "a":
			if !an && src.HasAudio {
				return true
			}
		case "s":
			if !sn {
				return true
			}
		case "d", "t":
			if !dn {
				return true
			}
		default: // 0 or 0:N: every stream, or one by index
			if !(an && sn && dn) {
				return true
			}
		}
	}
	return false
}

// ConcatList is the concat demuxer's list that stitches the encoded chunks
// (names relative to the list's directory) on the source's timeline: each
// chunk lasts exactly until the next one's start, so a chunk's first frame
// lands at its Start, however its container shifted its timestamps.
func ConcatList(chunks []Chunk, names []string) string {
	var b strings.Builder
	b.WriteString("ffconcat version 1.0\n")
	for i, c := range chunks {
		fmt.Fprintf(&b, "file '%s'\n", strings.ReplaceAll(names[i], "'", `'\''`))
		// Both ends rounded alike: the durations add up to the starts exactly.
		d := math.Round(c.End*1e6) - math.Round(c.Start*1e6)
		fmt.Fprintf(&b, "duration %s\n", seconds(d/1e6))
	}
	return b.String()
}

// StitchArgs is the argv that joins the encoded chunks (list: ConcatList's
// file) and muxes AuxArgs's file (aux; "" without one) back in, stream copy,
// into the user's output with the user's container options (-movflags
// +faststart, -f, -metadata, -tag:v...). The video is placed where it started
// in the source relative to the container's start, as ffmpeg places it.
func StitchArgs(src *Source, cmd *Command, list, aux string) []string {
	a := []string{"-y"}
	a = append(a, flatten(cmd.Global, keepGlobal)...)
	if off := src.Start - src.FormatStart; math.Abs(off) >= 1e-6 {
		a = append(a, "-itsoffset", seconds(off))
	}
	a = append(a, "-f", "concat", "-safe", "0", "-i", list)
	if aux != "" {
		a = append(a, "-i", aux)
	}
	a = append(a, "-map", "0:v:0")
	if aux != "" {
		a = append(a, "-map", "1", "-map_metadata", "1", "-map_chapters", "1")
	}
	a = append(a, "-c", "copy")
	for _, o := range cmd.OutputOpts {
		if o.Name == "metadata" || o.Name == "disposition" || o.Name == "tag" {
			// Global metadata is in aux; the video's own comes here.
			if aux != "" && o.Name == "metadata" && o.Spec == "" {
				continue
			}
			if aux != "" && o.Spec != "" && specType(o.Spec) != 'v' {
				continue
			}
			a = append(a, o.words()...)
			continue
		}
		if isMuxerOption(o.Name) {
			a = append(a, o.words()...)
		}
	}
	return append(a, cmd.Output)
}

// flatten writes opts back as words, those keep accepts (all when nil).
func flatten(opts []Opt, keep func(Opt) bool) []string {
	var a []string
	for _, o := range opts {
		if keep == nil || keep(o) {
			a = append(a, o.words()...)
		}
	}
	return a
}

// keepGlobal drops the global options that the steps set themselves.
func keepGlobal(o Opt) bool {
	switch o.Name {
	case "y", "n", "vsync", "filter_complex", "lavfi", "stdin":
		return false
	}
	return true
}

// isDecoderOption tells input options that shape the decoding (kept for a
// chunk's encode) from those that read the source's container (kept for the
// split and the aux step).
func isDecoderOption(o Opt) bool {
	switch o.Name {
	case "c", "hwaccel", "hwaccel_device", "hwaccel_output_format", "threads", "thread_type",
		"autorotate", "noautorotate", "lowres", "flags", "flags2", "strict", "ec", "err_detect",
		// decoder options that change the pictures: the split's stream
		// copy would ignore them, and the chunk's decode must have them
		"skip_loop_filter", "skip_idct", "idct", "bug", "skip_top", "skip_bottom",
		"apply_cropping", "skip_alpha", "apply_defdispwin", "filmgrain", "apply_grain":
		return true
	}
	return false
}

// isVideoLess tells options for audio, subtitles or data only.
func isVideoLess(o Opt) bool {
	if t := specType(o.Spec); t == 'a' || t == 's' || t == 'd' || t == 't' {
		return true
	}
	switch o.Name {
	case "ar", "ac", "channel_layout", "sample_fmt", "an", "sn", "dn", "vol", "aq", "atag", "shortest":
		return true
	}
	return false
}

// isMuxerOption tells options of the output's container: they belong to the
// stitch, and the chunks' NUT muxer would refuse them.
func isMuxerOption(name string) bool {
	switch name {
	case "f", "movflags", "brand", "use_editlist", "video_track_timescale", "write_tmcd", "timecode",
		"map_metadata", "map_chapters", "output_ts_offset", "avoid_negative_ts", "muxdelay",
		"muxpreload", "max_interleave_delta", "flush_packets", "metadata_header_padding",
		"cluster_size_limit", "cluster_time_limit", "cues_to_front", "reserve_index_space",
		"default_mode", "live", "dash", "dash_track_number", "moov_size", "skip_iods", "mov_gamma",
		"empty_hdlr_name", "ism_lookahead", "packetsize", "id3v2_version", "write_id3v1", "write_xing",
		"metadata", "disposition", "tag", "fflags", "seekable", "chunk_duration", "chunk_size":
		return true
	}
	for _, p := range []string{"frag", "write_", "mpegts_", "encryption_", "iods_", "movie_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// seconds writes a time as ffmpeg reads durations: microseconds.
func seconds(s float64) string {
	return fmt.Sprintf("%.6f", s)
}
