package command

import "strings"

// The policy tables: which of the options and filters ffmpeg knows (options_gen.go)
// are refused, and which take a path. Names are without the leading "-".

// refusedOptions make ffmpeg open a path or URL the command line does not show,
// widen what it may open, load code, or reach devices and the network. The value
// is the reason given in the error.
var refusedOptions = map[string]string{
	// Widen what ffmpeg may open.
	"protocol_whitelist":         "it widens the protocols ffmpeg may open (an HLS playlist's segments could come from anywhere)",
	"protocol_blacklist":         "it changes the protocols ffmpeg may open",
	"safe":                       "-safe 0 lets a concat list name absolute paths and URLs",
	"allowed_extensions":         "it lets an HLS or DASH playlist open files of any type",
	"allowed_segment_extensions": "it lets an HLS playlist open segments of any type",
	"extension_picky":            "it lets an HLS playlist open segments whatever their extension",
	"enable_drefs":               "it lets a MOV/MP4 file open the other files it names",
	"use_absolute_path":          "it lets a MOV/MP4 file's references name absolute paths",
	// Read or write a file the command line does not show.
	"fpre":                  "it reads options from a preset file",
	"vpre":                  "it reads options from a preset file found outside the job (~/.ffmpeg, $FFMPEG_DATADIR)",
	"apre":                  "it reads options from a preset file found outside the job (~/.ffmpeg, $FFMPEG_DATADIR)",
	"spre":                  "it reads options from a preset file found outside the job (~/.ffmpeg, $FFMPEG_DATADIR)",
	"pre":                   "it reads options from a preset file found outside the job (~/.ffmpeg, $FFMPEG_DATADIR)",
	"hls_key_info_file":     "it reads a file that names further paths and URLs",
	"dump_attachment":       "it writes files named after the input's attachments",
	"filter_script":         "it reads a filter graph from a file the checks never see",
	"filter_complex_script": "it reads a filter graph from a file the checks never see",
	"graph_file":            "it reads a lavfi graph from a file the checks never see",
	"assetmaps":             "it makes the IMF demuxer open the files listed in it and in the asset maps",
	"progress":              "the runner owns -progress",
	// Load code.
	"omx_libname":   "it loads a shared library",
	"omx_libprefix": "it loads a shared library",
	"load_plugin":   "it loads an Intel Media SDK plugin",
	"load_plugins":  "it loads Intel Media SDK plugins",
	// The network (commands cannot name URLs: these have no legitimate use) and devices.
	"http_proxy":     "it connects to a host the command names",
	"listen":         "it opens a network listener",
	"rtmp_listen":    "it opens a network listener",
	"rtmp_swfverify": "it fetches a URL",
	"gateway":        "it fetches through an IPFS gateway the command names",
	"ca_file":        "it reads key material for network protocols, which commands cannot use",
	"cafile":         "it reads key material for network protocols, which commands cannot use",
	"cert_file":      "it reads key material for network protocols, which commands cannot use",
	"key_file":       "it reads key material for network protocols, which commands cannot use",
	"private_key":    "it reads key material for network protocols, which commands cannot use",
	"sources":        "it opens a device to list its sources",
	"sinks":          "it opens a device to list its sinks",
}

// exitReason refuses the other options that print information and exit (-h,
// -version, -formats...): a job's command writes files.
const exitReason = "it prints information and exits"

// pathOptions take a file name, which must be a job-relative path: not empty, not
// absolute, no "..", no ":" (protocol prefix), no "~", and only declared inputs/
// and outputs/ names. -i is one too (but see -f lavfi).
var pathOptions = map[string]bool{
	"i":           true,
	"vstats_file": true,
	"passlogfile": true, // main option, and libx264's
	"sdp_file":    true,
	"attach":      true,
	// ffmpeg 6.1+ encoder and muxer statistics.
	"stats_enc_pre":  true,
	"stats_enc_post": true,
	"stats_mux_pre":  true,
	// Segment, HLS and DASH muxers: files written next to the playlist.
	"hls_segment_filename":    true,
	"hls_fmp4_init_filename":  true,
	"hls_subtitle_path":       true,
	"master_pl_name":          true,
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

// refusedFilters open a network listener or load code.
var refusedFilters = map[string]string{
	"zmq":        "it opens a network listener",
	"azmq":       "it opens a network listener",
	"frei0r":     "it loads a plugin (shared library)",
	"frei0r_src": "it loads a plugin (shared library)",
	"ladspa":     "it loads a plugin (shared library)",
	"lv2":        "it loads a plugin (shared library)",
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
