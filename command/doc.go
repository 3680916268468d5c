// Package command turns a client's ffmpeg argument string into the argv the runner
// executes: split like a POSIX shell splits words (never run through a shell),
// placeholders rewritten to job paths, every file reference checked. All pure.
//
// The policy is an allowlist, in two layers.
//
// Every word is checked as written and as ffmpeg's filter parser unescapes it: no
// absolute paths, no "..", no URLs or protocol prefixes, no inputs/ or outputs/
// name that the job does not declare, no GPU codec or filter unless the pool has
// GPUs, no refused option anywhere.
//
// Then argv is read as ffmpeg's command-line parser reads it. An option must be
// one that the ffmpeg the tables were generated from knows (options_gen.go, from
// its -h full output: main options and the AVOptions of codecs, formats,
// protocols and filters; -noX for its boolean options); an option that takes a
// value takes the next word. Refused, with the reason in the error:
//   - options that widen what ffmpeg may open (-protocol_whitelist, -safe,
//     -allowed_extensions, -enable_drefs, ...), read or write a file the command
//     line does not show (-fpre/-vpre/..., -filter_script, -hls_key_info_file,
//     -dump_attachment, ...), load code (-omx_libname, ...), reach the network or
//     devices (-listen, -http_proxy, -sources, ...), -progress (the runner's),
//     and the options that print information and exit (policy.go);
//   - devices as formats (-f v4l2, x11grab, alsa, ...; -f lavfi is allowed for
//     inputs, its -i then being a filter graph);
//   - filters that open a network listener (zmq, azmq) or load code (frei0r,
//     ladspa, lv2), sendcmd/asendcmd reading a file, unknown filters: filter
//     graphs (-vf, -af, -filter, -filter_complex, -lavfi, -f lavfi's -i) are
//     parsed as libavfilter parses them;
//   - without GPUs, hardware codecs, filters and options (-hwaccel, -init_hw_device,
//     *_nvenc, scale_cuda, *_vaapi, *_qsv, hwupload, ...).
//
// Files: output files, -i and the options that name a file (-passlogfile,
// -hls_segment_filename, -segment_list, -attach, ...; pathOptions) take a
// job-relative path: not empty, not absolute, no "..", no ":", no "~", and
// inputs/<name> and outputs/<name> only for declared names. Key=value lists of
// options for nested muxers (-hls_segment_options, -format_opts, tee outputs) are
// checked the same way.
//
// Regenerate the tables with go generate ./command when the workers' ffmpeg
// changes; TestOptionsGenCurrent fails in CI when they differ.
package command
