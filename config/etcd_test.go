package config

import (
	"strings"
	"testing"
	"time"
)

func TestEtcdSizeDefaults(t *testing.T) {
	for _, src := range []string{"", "etcd {\n  embedded = false\n}\n"} {
		c, err := Parse([]byte(src), "x.hcl")
		if err != nil {
			t.Fatal(err)
		}
		e := c.Etcd
		if e.CompactionRetentionD != 10*time.Minute || e.QuotaBackendBytes != 8589934592 || e.DefragEveryD != 10*time.Minute ||
			e.DefragFreeRatio != 0.5 || e.DefragMinBytes != 64<<20 {
			t.Fatalf("%q: etcd defaults %+v", src, e)
		}
	}
	c, err := Parse([]byte("etcd {\n  compaction_retention = \"1h\"\n  quota_backend_bytes = 2147483648\n  defrag_every = \"30m\"\n  defrag_free_ratio = 0.3\n  defrag_min_bytes = 0\n}\n"), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Etcd; e.CompactionRetentionD != time.Hour || e.QuotaBackendBytes != 2<<30 || e.DefragEveryD != 30*time.Minute || e.DefragFreeRatio != 0.3 || e.DefragMinBytes != 0 {
		t.Fatalf("etcd settings %+v", e)
	}
}

func TestEtcdSizeErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"etcd {\n  compaction_retention = \"often\"\n}\n", `bad.hcl:2,3: Invalid duration`},
		{"etcd {\n  compaction_retention = \"0\"\n}\n", `bad.hcl:2,3: Invalid duration`},
		{"etcd {\n  compaction_retention = \"10s\"\n}\n", `bad.hcl:2,3: Invalid compaction_retention`},
		{"etcd {\n  quota_backend_bytes = 1048576\n}\n", `bad.hcl:2,3: Invalid quota_backend_bytes`},
		{"etcd {\n  quota_backend_bytes = 214748364800\n}\n", `bad.hcl:2,3: Invalid quota_backend_bytes`},
		{"etcd {\n  defrag_every = \"-1m\"\n}\n", `bad.hcl:2,3: Invalid duration`},
		{"etcd {\n  defrag_every = \"5s\"\n}\n", `bad.hcl:2,3: Invalid defrag_every`},
		{"etcd {\n  defrag_free_ratio = 0\n}\n", `bad.hcl:2,3: Invalid defrag_free_ratio`},
		{"etcd {\n  defrag_free_ratio = 1\n}\n", `bad.hcl:2,3: Invalid defrag_free_ratio`},
		{"etcd {\n\n  defrag_free_ratio = 1.5\n}\n", `bad.hcl:3,3: Invalid defrag_free_ratio`},
		{"etcd {\n  defrag_min_bytes = -1\n}\n", `bad.hcl:2,3: Invalid defrag_min_bytes`},
		{"etcd {\n  quota_backend_bytes = 134217728\n  defrag_min_bytes = 134217728\n}\n", `bad.hcl:3,3: Invalid defrag_min_bytes`},
		{"etcd {\n  quota_backend_bytes = \"lots\"\n}\n", `bad.hcl:2,26: Unsuitable value type`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "bad.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.src, err, c.want)
		}
	}
}
