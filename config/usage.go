package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
)

// Usage configures usage metering (docs/usage.md).
type Usage struct {
	// RetentionDays is how many UTC days of per-account usage totals etcd keeps
	// (the janitor deletes older days); default 400.
	RetentionDays int `hcl:"retention_days,optional"`
	// PerAccountMetrics adds mediajobs_account_usage_* series with an account
	// label beside the per-pool ones: one series per account and pool, so only
	// for installations with a bounded number of accounts. Default off.
	PerAccountMetrics bool `hcl:"per_account_metrics,optional"`

	RetentionRange hcl.Range `hcl:"retention_days,attr_range"`
}

// DefaultUsageRetentionDays is usage.retention_days's default.
const DefaultUsageRetentionDays = 400

// check reports what is wrong with the usage block.
func (u *Usage) check(ck *checker) {
	if u.RetentionDays < 1 || u.RetentionDays > 100*366 {
		ck.bad(u.RetentionRange, "Invalid retention_days", fmt.Sprintf("usage retention_days = %d; use how many days of usage to keep, at least 1 (default %d).", u.RetentionDays, DefaultUsageRetentionDays))
	}
}
