package command

import (
	"strings"
	"testing"
)

// On a GPU pool without NVENC, every NVENC encoder is refused with the pool's
// text; decoding on the GPU and CUDA filters are not.
func TestNoNVENC(t *testing.T) {
	spec := Spec{Inputs: map[string]bool{"video": true}, Outputs: map[string]bool{"out.mp4": true}, AllowGPU: true,
		NoNVENC: `no NVENC here; use "machine": "l4"`}
	refused := []string{
		"-i inputs/video -c:v h264_nvenc outputs/out.mp4",
		"-i inputs/video -c:v:0 hevc_nvenc outputs/out.mp4",
		"-i inputs/video -vcodec AV1_NVENC outputs/out.mp4",
		"-i inputs/video -codec:v nvenc outputs/out.mp4",
		"-i inputs/video -c:v nvenc_h264 outputs/out.mp4",
		"-i inputs/video -c nvenc_hevc outputs/out.mp4",
		"-hwaccel cuda -hwaccel_output_format cuda -i inputs/video -vf scale_cuda=1280:720 -c:v h264_nvenc outputs/out.mp4",
	}
	for _, c := range refused {
		_, err := Prepare(c, spec)
		if err == nil || !strings.Contains(err.Error(), spec.NoNVENC) || !strings.Contains(strings.ToLower(err.Error()), "nvenc") {
			t.Errorf("Prepare(%q) err = %v, want the NoNVENC text naming the encoder", c, err)
		}
		// The same command is fine where the GPUs encode.
		ok := spec
		ok.NoNVENC = ""
		if _, err := Prepare(c, ok); err != nil {
			t.Errorf("Prepare(%q) with NVENC: %v", c, err)
		}
	}
	allowed := []string{
		"-hwaccel cuda -i inputs/video -c:v libx264 outputs/out.mp4",
		"-hwaccel cuda -hwaccel_output_format cuda -i inputs/video -vf scale_cuda=1280:720,hwdownload,format=nv12 -c:v libx264 outputs/out.mp4",
		"-c:v h264_cuvid -i inputs/video -c:v libx264 outputs/out.mp4",
		"-hwaccel nvdec -i inputs/video -vf scale_npp=640:360 -c:v libx264 outputs/out.mp4",
		"-i inputs/video -c:v copy outputs/out.mp4",
	}
	for _, c := range allowed {
		if _, err := Prepare(c, spec); err != nil {
			t.Errorf("Prepare(%q) = %v, want it allowed without NVENC", c, err)
		}
	}
}

func TestIsNVENCEncoder(t *testing.T) {
	for name, want := range map[string]bool{
		"h264_nvenc": true, "hevc_nvenc": true, "av1_nvenc": true, "nvenc": true, "nvenc_h264": true, "nvenc_hevc": true, "H264_NVENC": true,
		"h264_cuvid": false, "hevc_cuvid": false, "libx264": false, "h264": false, "scale_cuda": false, "h264_nvdec": false, "nvdec": false,
	} {
		if got := IsNVENCEncoder(name); got != want {
			t.Errorf("IsNVENCEncoder(%q) = %v, want %v", name, got, want)
		}
	}
}
