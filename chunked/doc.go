// Package chunked is the pure core of chunked encoding (docs/chunked.md): one
// ffmpeg command with one video input and one output, encoded as chunks on many
// workers and stitched back, with a report that proves the stitched file right.
//
// The pieces, in the order a chunked job runs them:
//   - Parse (and Check) read a command as command.Prepare leaves it and refuse,
//     naming the option or filter, what cannot be split: time-dependent
//     filters, output trimming, a second timeline, segmenting muxers, two-pass;
//   - Probe reads the source's packet index (no decoding) and refuses broken
//     timestamps; Source.Plan cuts at keyframes near every chunk_seconds;
//     Source.Roll adds the frames around each chunk that the filters read
//     (Command.Reach: yadif, bwdif), filtered with it and dropped after;
//   - SplitArgs stream-copies each chunk (video only, original timestamps);
//     EncodeArgs runs the user's video options on one chunk with a closed
//     keyframe at its start; AuxArgs runs the user's command without video once
//     (audio, subtitles, metadata); StitchArgs and ConcatList join the chunks
//     with the source's timestamps and mux the rest back in;
//   - Verify checks the stitched file against the plan and the source and says
//     how in a Report.
//
// Everything but Probe and Verify is pure: argv in, argv out. Probe and Verify
// run the ffprobe and ffmpeg they are given.
package chunked
