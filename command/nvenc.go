package command

import (
	"fmt"
	"strings"
)

// IsNVENCEncoder reports whether name is one of ffmpeg's NVENC encoders:
// h264_nvenc, hevc_nvenc, av1_nvenc, and the old names nvenc, nvenc_h264,
// nvenc_hevc. Decoders (*_cuvid, -hwaccel cuda) and CUDA filters are not.
func IsNVENCEncoder(name string) bool {
	l := strings.ToLower(name)
	return strings.HasSuffix(l, "_nvenc") || l == "nvenc" || strings.HasPrefix(l, "nvenc_")
}

// checkNVENC refuses an NVENC encoder as the value v of the codec option w on a
// pool whose GPUs cannot encode (Spec.NoNVENC).
func checkNVENC(w, v string, spec Spec) error {
	if spec.NoNVENC != "" && IsNVENCEncoder(v) {
		return fmt.Errorf("%s %q: %s", w, v, spec.NoNVENC)
	}
	return nil
}
