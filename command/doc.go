// Package command turns a client's ffmpeg argument string into the argv the runner
// executes: split like a POSIX shell splits words (never run through a shell),
// placeholders rewritten to job paths, every word checked for what it is where
// ffmpeg reads it. All pure, but for Options, which runs the worker's ffmpeg once
// to read its help.
//
// The sandbox is the guarantee (docs/threat-model.md): ffmpeg sees only its job's
// directory and the read-only files it needs, with no network. The checker
// refuses only what the sandbox does not contain or what cannot work there, and
// every refusal names the word, the reason and what to write instead:
//   - code: filters frei0r, ladspa, lv2; -omx_libname, -load_plugin;
//   - options or graphs read from a file the checker never sees: -fpre/-vpre/...,
//     -filter_script, -filter_complex_script, -graph_file, ffmpeg 7's -/opt;
//   - devices as formats (-f v4l2, x11grab, alsa...; -f lavfi stays for inputs),
//     -sources, -sinks;
//   - the runner's channel: -progress;
//   - the network: URLs and protocol prefixes in paths, -listen, -http_proxy, TLS
//     files, -protocol_whitelist naming network protocols, zmq and azmq;
//   - absolute paths and ".." on the command line, and inputs/ and outputs/ names
//     the job does not declare;
//   - without GPUs, hardware codecs, filters and options.
//
// Allowed because the sandbox contains them: concat lists with -safe 0, the
// concat protocol over job paths (each part checked), /dev/null and NUL as the
// null sink (run with -f null), patterns over declared inputs (img%03d.png,
// -pattern_type glob), HLS ladders (%v directories, -master_pl_name checked where
// the muxer writes it), playlists with their extension checks off, sendcmd f=.
// Text that ffmpeg writes and never opens (-metadata, -hls_base_url, drawtext's
// text) is not checked for paths or URLs. The policy is data: the tables of
// policy.go.
//
// argv is read as ffmpeg's command-line parser reads it (walk): an option must be
// one the ffmpeg the tables were generated from knows (options_gen.go: main
// options and the AVOptions of codecs, formats, protocols and filters; -noX for
// its boolean options; -vX/-aX/-sX for a codec option X), and one that takes a
// value takes the next word. An option or filter the table lacks is deferred at
// the gateway when well-formed and checked on the worker against its own ffmpeg
// (Spec.Worker, Options). Filter graphs are parsed as libavfilter parses them;
// tee lists, also behind -f fifo -fifo_format tee, and key=value lists of nested
// muxer options are split and checked. Parsing is linear in the command's length.
//
// Regenerate the tables with go generate ./command when the workers' ffmpeg
// changes; TestOptionsGenCurrent fails in CI when they differ.
package command
