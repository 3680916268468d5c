package config

import (
	"fmt"
	"regexp"
	"strings"
)

// noNVENCRe matches the model names of NVIDIA GPUs that have video decoders (NVDEC)
// but no video encoder (NVENC), as the Nomad nvidia device plugin reports them
// (NVML's device name: "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", and with
// MIG "NVIDIA A100-SXM4-40GB MIG 1g.5gb"). The list follows NVIDIA's "Video Encode
// and Decode GPU Support Matrix" (developer.nvidia.com/video-encode-and-decode-gpu-support-matrix-new),
// where these models have 0 NVENC:
//
//   - GA100 (Ampere compute): A100, A100X, A800, A30, A30X;
//   - GH100 (Hopper): H100, H800, H200, H20, and the GH200 superchip;
//   - GB100 (Blackwell compute): B100, B200, GB200.
//
// The other data-center GPUs do encode: V100, P100, T4, A2, A10, A10G, A16, A40,
// L4, L40, L40S, the RTX and RTX PRO cards, and the GeForce cards. Names are matched
// as whole words, so "A30" is not the RTX A3000 nor "A100" the RTX A1000, and
// "H20" is not the H200. A model missing here is taken to encode: a pool of
// such GPUs says `encode = false` in its gpu block (see docs/configuration.md).
var noNVENCRe = regexp.MustCompile(`(?i)\b(A100X?|A800|A30X?|H100|H800|H200|H20|GH200|B100|B200|GB200)\b`)

// ModelHasNVENC reports whether the GPU model (the device plugin's model name)
// has an NVENC video encoder, according to the table above.
func ModelHasNVENC(model string) bool { return !noNVENCRe.MatchString(model) }

// gpuModels are device model names as the Nomad nvidia device plugin reports them,
// one or more per data-center GPU, against which a pool's `model` regular
// expression is matched (as Nomad matches it) to tell whether the pool may land on
// a GPU without NVENC.
var gpuModels = []string{
	// Without NVENC.
	"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe",
	"NVIDIA A100X", "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe", "NVIDIA A30", "NVIDIA A30X",
	"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H800", "NVIDIA H800 PCIe",
	"NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H20", "NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e",
	"NVIDIA B100", "NVIDIA B200", "NVIDIA GB200",
	// With NVENC.
	"Tesla K80", "Tesla M60", "Tesla P4", "Tesla P40", "Tesla P100-PCIE-16GB", "Tesla V100-SXM2-16GB",
	"Tesla V100-SXM2-32GB", "Tesla V100-PCIE-32GB", "Tesla T4", "NVIDIA A2", "NVIDIA A10", "NVIDIA A10G",
	"NVIDIA A16", "NVIDIA A40", "NVIDIA L4", "NVIDIA L40", "NVIDIA L40S", "NVIDIA RTX A4000",
	"NVIDIA RTX A6000", "NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX PRO 6000 Blackwell Server Edition",
	"NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090",
}

// nvencFromModel tells from a pool's model expression whether its GPUs can encode:
// not when the expression matches the name of a GPU without NVENC, either a known
// model name or the expression's own text ("H100", "A100-SXM4.*"); otherwise yes.
// why names the models without NVENC it matched.
func nvencFromModel(model string) (ok bool, why string) {
	if model == "" {
		return true, ""
	}
	if !ModelHasNVENC(model) {
		return false, fmt.Sprintf("its gpu model %q names GPUs without NVENC", model)
	}
	re, err := regexp.Compile(model)
	if err != nil {
		return true, "" // reported by the checks
	}
	var without []string
	for _, m := range gpuModels {
		if re.MatchString(m) && !ModelHasNVENC(m) {
			without = append(without, m)
		}
	}
	if len(without) == 0 {
		return true, ""
	}
	if len(without) > 3 {
		without = append(without[:3], "…")
	}
	return false, fmt.Sprintf("its gpu model %q matches GPUs without NVENC (%s)", model, strings.Join(without, ", "))
}

// setNVENC decides g.NVENC: encode when set, else from model.
func (g *GPU) setNVENC() {
	switch {
	case g.Encode != nil && *g.Encode:
		g.NVENC, g.NoNVENCWhy = true, ""
	case g.Encode != nil:
		g.NVENC, g.NoNVENCWhy = false, "its gpu block says encode = false"
	default:
		g.NVENC, g.NoNVENCWhy = nvencFromModel(g.Model)
	}
}

// CanEncode reports whether the pool has GPUs with an NVENC video encoder.
func (p *Pool) CanEncode() bool { return p.GPU != nil && p.GPU.NVENC }

func (g *GPU) defaults() {
	if g.Count == 0 {
		g.Count = 1
	}
	if g.Vendor == "" {
		g.Vendor = "nvidia"
	}
	g.setNVENC()
}

// check reports what is wrong with pool p's gpu block.
func (g *GPU) check(p *Pool, ck *checker) {
	if g.Vendor != "nvidia" {
		ck.bad(g.VendorRange, "Unsupported GPU vendor", fmt.Sprintf("pool %q: gpu vendor %q is not supported; use \"nvidia\".", p.Name, g.Vendor))
	}
	if g.Count < 1 || g.Count > 16 {
		ck.bad(g.CountRange, "Invalid GPU count", fmt.Sprintf("pool %q: gpu count = %d must be between 1 and 16.", p.Name, g.Count))
	}
	if g.MinMemoryMB < 0 {
		ck.bad(g.MinMemRange, "Invalid min_memory_mb", fmt.Sprintf("pool %q: gpu min_memory_mb = %d: use the least GPU memory in MiB, or leave it unset.", p.Name, g.MinMemoryMB))
	}
	if _, err := regexp.Compile(g.Model); g.Model != "" && err != nil {
		ck.bad(g.ModelRange, "Invalid GPU model", fmt.Sprintf("pool %q: gpu model = %q is not a regular expression (Nomad matches the device model with it): %v.", p.Name, g.Model, err))
	}
}
