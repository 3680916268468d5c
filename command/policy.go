package command

import "strings"

// The policy tables. The sandbox (docs/threat-model.md) is the guarantee: ffmpeg
// sees only its job's directory and the read-only files it needs to start, with no
// network. The checker refuses only what the sandbox does not contain or what
// cannot work inside it, and says what to write instead. Names are without the
// leading "-".

// refusal is why a word is refused and what to write instead.
type refusal struct{ why, instead string }

const (
	noNetwork   = "commands run without network"
	useInputs   = "put each file in input_files and name it inputs/<name>"
	writeInline = "write the options on the command line"
	noCode      = "commands cannot load code: use ffmpeg's built-in filters and codecs"
)

// refusedOptions load code, reach devices or the network, or take the runner's
// own channels. The sandbox contains everything else these options could open
// (playlists and concat lists naming files, MOV references, ...): those run.
var refusedOptions = map[string]refusal{
	// Options read from a file the checker never sees: they could load code
	// (a preset line omx_libname=...).
	"fpre":                  {"it applies options from a file the checker never sees", writeInline},
	"vpre":                  {"it applies options from a preset file the checker never sees", writeInline + " (for libx264, -preset slow)"},
	"apre":                  {"it applies options from a preset file the checker never sees", writeInline},
	"spre":                  {"it applies options from a preset file the checker never sees", writeInline},
	"pre":                   {"it applies options from a preset file the checker never sees", writeInline + " (for libx264, -preset slow)"},
	"filter_script":         {"it reads a filter graph the checker never sees (a filter that loads code could be in it)", "give the graph with -filter or -vf/-af"},
	"filter_complex_script": {"it reads a filter graph the checker never sees (a filter that loads code could be in it)", "give the graph with -filter_complex"},
	"graph_file":            {"it reads a lavfi graph the checker never sees (a filter that loads code could be in it)", "give the graph with -graph or -f lavfi -i"},
	// The runner's own channel.
	"progress": {"the runner owns -progress (it reports the job's progress from it)", "drop it: the job view's progress shows ffmpeg's"},
	// Load code.
	"omx_libname":   {"it loads a shared library", noCode},
	"omx_libprefix": {"it loads a shared library", noCode},
	"load_plugin":   {"it loads an Intel Media SDK plugin", noCode},
	"load_plugins":  {"it loads Intel Media SDK plugins", noCode},
	// The network, which commands do not have, and devices.
	"http_proxy":     {noNetwork, useInputs},
	"listen":         {"it opens a network listener, and " + noNetwork, useInputs},
	"rtmp_listen":    {"it opens a network listener, and " + noNetwork, useInputs},
	"rtmp_swfverify": {"it fetches a URL, and " + noNetwork, "drop it"},
	"gateway":        {"it fetches through an IPFS gateway, and " + noNetwork, useInputs},
	"ca_file":        {"it configures TLS, and " + noNetwork, "drop it; " + useInputs},
	"cafile":         {"it configures TLS, and " + noNetwork, "drop it; " + useInputs},
	"cert_file":      {"it configures TLS, and " + noNetwork, "drop it; " + useInputs},
	"key_file":       {"it configures TLS, and " + noNetwork, "drop it; " + useInputs},
	"private_key":    {"it configures TLS, and " + noNetwork, "drop it; " + useInputs},
	"sources":        {"it opens a device to list its sources", "drop it: jobs cannot use devices"},
	"sinks":          {"it opens a device to list its sinks", "drop it: jobs cannot use devices"},
}

// exitRefusal refuses the other options that print information and exit (-h,
// -version, -formats...): their arity is ambiguous, and a job runs ffmpeg on files.
var exitRefusal = refusal{"it prints information and exits", "run it on your own machine, or see ffmpeg's documentation"}

// MaxThreads is the most threads one thread option may ask for. A job's
// processes and threads are capped anyway (1,024: docker's pids_limit, a pids
// cgroup on raw_exec); this keeps one option from taking them all at once.
// 0 or "auto" lets ffmpeg choose, which it bounds by the cores.
const MaxThreads = 64

// threadOptions set a number of threads: as options, in option lists
// (-x264-params threads=) and as a filter's threads= option.
var threadOptions = map[string]bool{
	"threads": true, "filter_threads": true, "filter_complex_threads": true, "dec_threads": true,
	"framethreads": true, "tilethreads": true,
}

// localProtocols stay inside the job's directory: -protocol_whitelist may name
// them. Any other protocol needs the network, which commands do not have.
var localProtocols = map[string]bool{
	"file": true, "crypto": true, "data": true, "concat": true, "concatf": true, "subfile": true,
	"cache": true, "async": true, "md5": true, "hls": true,
}

// pathOptions take a file name, which must be a job-relative path: not empty, not
// absolute, no "..", no ":" (protocol prefix), no "~", and only declared inputs/
// and outputs/ names. -i is one too (but see -f lavfi, the concat protocol and
// patterns over inputs).
var pathOptions = map[string]bool{
	"i":                 true,
	"vstats_file":       true,
	"passlogfile":       true, // main option, and libx264's
	"sdp_file":          true,
	"attach":            true,
	"hls_key_info_file": true,
	// ffmpeg 6.1+ encoder and muxer statistics.
	"stats_enc_pre":  true,
	"stats_enc_post": true,
	"stats_mux_pre":  true,
	// Segment, HLS and DASH muxers: files written next to the playlist.
	"hls_segment_filename":    true,
	"hls_fmp4_init_filename":  true,
	"hls_subtitle_path":       true,
	"segment_list":            true,
	"segment_header_filename": true,
	"init_seg_name":           true,
	"media_seg_name":          true,
	"single_file_name":        true,
	"hls_master_name":         true,
	"header":                  true, // webm_chunk's init segment
	// Demuxers and decoders that open a second file.
	"sub_name":    true, // vobsub's .sub file
	"ifo_palette": true, // dvdsub's .IFO file
	// libx264's -stats (2-pass file) is shadowed by ffmpeg's boolean -stats: it
	// cannot be set on the command line but through -x264-params stats=, whose
	// value the word checks see.
}

// outputRelativeOptions name a file the muxer writes next to its output (the HLS
// master playlist: beside the variants' directories when the output's directory
// holds %v): checked as that path.
var outputRelativeOptions = map[string]bool{"master_pl_name": true}

// textOptions take text that ffmpeg writes into a file (metadata, playlist
// entries) and never opens: a URL or a path there is just text.
var textOptions = map[string]bool{
	"metadata": true, "hls_base_url": true, "hls_enc_key_url": true, "segment_list_entry_prefix": true,
	"utc_timing_url": true, "timecode": true, "program": true, "var_stream_map": true, "cc_stream_map": true,
}

// filterTextOptions are the filter options that take text (drawtext's text=).
var filterTextOptions = map[string]map[string]bool{
	"drawtext":  {"text": true},
	"metadata":  {"value": true},
	"ametadata": {"value": true},
}

// readOnlyPrefixes are absolute paths in the sandbox's read-only start set that
// filter options may name (fonts for drawtext).
var readOnlyPrefixes = []string{"/usr/share/fonts/"}

// nullSinks are the output names of the null sink; the value is what ffmpeg gets,
// with -f null for that output (walk).
var nullSinks = map[string]string{"/dev/null": "/dev/null", "NUL": "/dev/null", "nul": "/dev/null"}

// filterOptions take a filter graph (-vf, -af, -filter, -filter_complex, -lavfi,
// and the lavfi device's -graph); so does -i after -f lavfi.
var filterOptions = map[string]bool{"vf": true, "af": true, "filter": true, "filter_complex": true, "lavfi": true, "graph": true}

// formatOptions name a muxer or demuxer: no device (but lavfi for an input).
var formatOptions = map[string]bool{"f": true, "segment_format": true, "fifo_format": true}

// codecOptions name a codec: checked for GPU codecs.
var codecOptions = map[string]bool{"c": true, "codec": true, "vcodec": true, "acodec": true, "scodec": true, "dcodec": true}

// stringDictOptions are string options parsed as key=value lists, like the
// dictionary options of options_gen.go.
var stringDictOptions = map[string]bool{"hls_vtt_options": true}

// refusedFilters load code or open a network listener.
var refusedFilters = map[string]refusal{
	"zmq":        {"it opens a network listener, and " + noNetwork, "send timed commands with sendcmd=c='...'"},
	"azmq":       {"it opens a network listener, and " + noNetwork, "send timed commands with asendcmd=c='...'"},
	"frei0r":     {"it loads a plugin (shared library)", noCode},
	"frei0r_src": {"it loads a plugin (shared library)", noCode},
	"ladspa":     {"it loads a plugin (shared library)", noCode},
	"lv2":        {"it loads a plugin (shared library)", noCode},
}

// gpuOptions need a GPU (refused unless Spec.AllowGPU).
var gpuOptions = map[string]bool{
	"hwaccel": true, "hwaccel_device": true, "hwaccel_output_format": true,
	"init_hw_device": true, "filter_hw_device": true, "vaapi_device": true, "qsv_device": true,
}

// gpuNames are parts of the names of GPU codecs, filters and options.
var gpuNames = []string{
	"_nvenc", "_cuvid", "_npp", "cuda", "nvdec", "vaapi", "qsv", "vulkan", "opencl",
	"_amf", "_v4l2m2m", "_videotoolbox", "libplacebo", "hwupload", "hwdownload", "hwmap",
}

const gpuMessage = "need a GPU machine (e.g. \"machine\": \"nvidia\")"

func isGPUName(name string) bool {
	l := name
	for i := 0; i < len(name); i++ {
		if c := name[i]; c >= 'A' && c <= 'Z' {
			l = strings.ToLower(name)
			break
		}
	}
	for _, g := range gpuNames {
		if strings.Contains(l, g) {
			return true
		}
	}
	return false
}

// On a pool without a sandbox (sandbox = "none", Spec.Unsandboxed) nothing
// contains what a list or playlist names: there the checker also refuses the
// forms that open files it never sees, as it did before the sandbox was the
// guarantee. It still sees only the command, not the inputs' contents: such a
// pool trusts every key with the node (config check says so; docs/threat-model.md).
const noSandbox = "this pool runs ffmpeg without a sandbox, where it could open any file of the node"

// unsandboxedOptions are refused on pools without a sandbox.
var unsandboxedOptions = map[string]refusal{
	"safe":                       {"-safe 0 lets a concat list name absolute paths, and " + noSandbox, "drop it: a list may name the files beside it (the default, -safe 1)"},
	"allowed_extensions":         {"it lets a playlist open files of any type, and " + noSandbox, "run the job on a sandboxed pool"},
	"allowed_segment_extensions": {"it lets a playlist open segments of any type, and " + noSandbox, "run the job on a sandboxed pool"},
	"extension_picky":            {"it lets a playlist open segments whatever their extension, and " + noSandbox, "run the job on a sandboxed pool"},
	"enable_drefs":               {"it lets a MOV/MP4 file open the files it names, and " + noSandbox, "drop it"},
	"use_absolute_path":          {"it lets a MOV/MP4 file name absolute paths, and " + noSandbox, "drop it"},
	"hls_key_info_file":          {"it reads a file that names further files, and " + noSandbox, "run the job on a sandboxed pool"},
	"assetmaps":                  {"it makes the IMF demuxer open the files its asset maps name, and " + noSandbox, "run the job on a sandboxed pool"},
	"dump_attachment":            {"it writes files named by the input's attachments, and " + noSandbox, "drop it"},
}

// unsandboxedPlaylist refuses a playlist input on a pool without a sandbox.
var unsandboxedPlaylist = refusal{"a playlist names files the checker never sees, and " + noSandbox, "run the job on a sandboxed pool, or give each file in input_files"}

// unsandboxedFormats are the input formats that open the files their input
// names (playlists, IMF); refused on pools without a sandbox.
var unsandboxedFormats = map[string]refusal{"hls": unsandboxedPlaylist, "dash": unsandboxedPlaylist, "imf": unsandboxedPlaylist}

// playlistExts are the names ffmpeg opens as playlists (the HLS demuxer is picked
// by extension); refused as inputs on pools without a sandbox.
var playlistExts = []string{".m3u8", ".m3u", ".mpd"}
