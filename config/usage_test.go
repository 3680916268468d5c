package config

import (
	"strings"
	"testing"
)

// The usage block: its defaults, a partial block keeping them, and a retention
// that keeps nothing refused at its line.
func TestUsageSettings(t *testing.T) {
	c, err := Parse([]byte(""), "t.hcl")
	if err != nil || c.Usage.RetentionDays != DefaultUsageRetentionDays || c.Usage.PerAccountMetrics {
		t.Fatalf("defaults: %+v, %v", c.Usage, err)
	}
	c, err = Parse([]byte("usage {\n  per_account_metrics = true\n}\n"), "t.hcl")
	if err != nil || c.Usage.RetentionDays != DefaultUsageRetentionDays || !c.Usage.PerAccountMetrics {
		t.Fatalf("per_account_metrics alone: %+v, %v", c.Usage, err)
	}
	_, err = Parse([]byte("usage {\n  retention_days = 0\n}\n"), "t.hcl")
	if err == nil || !strings.Contains(err.Error(), "t.hcl:2") || !strings.Contains(err.Error(), "retention_days") {
		t.Fatalf("retention_days = 0: %v", err)
	}
}
