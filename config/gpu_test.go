package config

import (
	"strings"
	"testing"
)

// Real device model names (NVML's, as the Nomad nvidia device plugin reports them)
// and whether the GPU has NVENC, per NVIDIA's Video Encode and Decode GPU Support
// Matrix.
func TestModelHasNVENC(t *testing.T) {
	cases := []struct {
		model string
		nvenc bool
	}{
		{"NVIDIA A100-SXM4-40GB", false},
		{"NVIDIA A100-SXM4-80GB", false},
		{"NVIDIA A100-PCIE-40GB", false},
		{"NVIDIA A100 80GB PCIe", false},
		{"NVIDIA A100-SXM4-40GB MIG 1g.5gb", false},
		{"NVIDIA A100X", false},
		{"NVIDIA A800-SXM4-80GB", false},
		{"NVIDIA A30", false},
		{"NVIDIA H100 80GB HBM3", false},
		{"NVIDIA H100 PCIe", false},
		{"NVIDIA H100 NVL", false},
		{"NVIDIA H100 80GB HBM3 MIG 1g.10gb", false},
		{"NVIDIA H800", false},
		{"NVIDIA H200", false},
		{"NVIDIA H200 NVL", false},
		{"NVIDIA H20", false},
		{"NVIDIA GH200 480GB", false},
		{"NVIDIA B200", false},
		{"NVIDIA GB200", false},

		{"Tesla K80", true},
		{"Tesla P4", true},
		{"Tesla P100-PCIE-16GB", true},
		{"Tesla V100-SXM2-16GB", true},
		{"Tesla V100-PCIE-32GB", true},
		{"Tesla T4", true},
		{"NVIDIA A2", true},
		{"NVIDIA A10", true},
		{"NVIDIA A10G", true},
		{"NVIDIA A16", true},
		{"NVIDIA A40", true},
		{"NVIDIA L4", true},
		{"NVIDIA L40S", true},
		{"NVIDIA RTX A1000", true},            // not an A100
		{"NVIDIA RTX A3000 Laptop GPU", true}, // not an A30
		{"NVIDIA RTX A6000", true},
		{"NVIDIA RTX 6000 Ada Generation", true},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", true},
		{"NVIDIA GeForce RTX 4090", true},
		{"NVIDIA GeForce GTX 1080 Ti", true},
		{"Quadro RTX 8000", true},
	}
	for _, c := range cases {
		if got := ModelHasNVENC(c.model); got != c.nvenc {
			t.Errorf("ModelHasNVENC(%q) = %v, want %v", c.model, got, c.nvenc)
		}
	}
}

// A pool's gpu block: explicit encode wins; otherwise its model expression decides;
// with neither, the pool is taken to encode.
func TestPoolEncode(t *testing.T) {
	cases := []struct {
		gpu     string
		nvenc   bool
		whyPart string
	}{
		{``, true, ""},
		{`model = "L4|A10G?$"`, true, ""},
		{`model = "Tesla T4"`, true, ""},
		{`model = "RTX"`, true, ""},
		{`model = "V100"`, true, ""},
		{`model = "H100"`, false, `"H100" names GPUs without NVENC`},
		{`model = "NVIDIA H200"`, false, "without NVENC"},
		{`model = "A100-SXM4-.*"`, false, "without NVENC"},
		// Written without a model name, still matching A100s and A30s.
		{`model = "A[0-9]+"`, false, "NVIDIA A100-SXM4-40GB"},
		{`model = "^NVIDIA H[0-9]00"`, false, "NVIDIA H100 80GB HBM3"},
		// A pool mixing L4s and A100s cannot promise an encoder.
		{`model = "L4|A100"`, false, "without NVENC"},
		{`encode = false`, false, "encode = false"},
		{"model = \"L4\"\n    encode = false", false, "encode = false"},
		{"model = \"H100\"\n    encode = true", true, ""},
	}
	for _, c := range cases {
		src := "pool \"cpu\" {}\npool \"g\" {\n  gpu {\n    " + c.gpu + "\n  }\n}\n"
		cfg, err := Parse([]byte(src), "gpu.hcl")
		if err != nil {
			t.Fatalf("%s: %v", c.gpu, err)
		}
		p := cfg.Pool("g")
		if p.CanEncode() != c.nvenc || p.GPU.NVENC != c.nvenc {
			t.Errorf("gpu { %s }: CanEncode = %v, want %v", c.gpu, p.CanEncode(), c.nvenc)
		}
		if !strings.Contains(p.GPU.NoNVENCWhy, c.whyPart) || (c.nvenc && p.GPU.NoNVENCWhy != "") {
			t.Errorf("gpu { %s }: why = %q, want it to hold %q", c.gpu, p.GPU.NoNVENCWhy, c.whyPart)
		}
		if cfg.Pool("cpu").CanEncode() {
			t.Errorf("a CPU pool has NVENC")
		}
	}
	// Pools built in code (dev, tests) are decided by Finish.
	c := Default()
	c.Pools = []*Pool{{Name: "a100", GPU: &GPU{Model: "A100"}}, {Name: "any", GPU: &GPU{}}}
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	if c.Pool("a100").CanEncode() || !c.Pool("any").CanEncode() {
		t.Fatalf("Finish: a100 %v, any %v", c.Pool("a100").GPU, c.Pool("any").GPU)
	}
}

// A wrong type for encode is reported at its line.
func TestEncodeMustBeBool(t *testing.T) {
	_, err := Parse([]byte("pool \"g\" {\n  gpu {\n    encode = \"maybe\"\n  }\n}\n"), "bad.hcl")
	if err == nil || !strings.Contains(err.Error(), "bad.hcl:3") {
		t.Fatalf("err = %v, want one at bad.hcl:3", err)
	}
}

// The example's GPU pool encodes; its model expression names no GPU without NVENC.
func TestExampleGPUPoolEncodes(t *testing.T) {
	c, err := Load("../deploy/mediajobs.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Pool("nvidia"); p == nil || !p.CanEncode() {
		t.Fatalf("nvidia pool: %+v", p.GPU)
	}
}
