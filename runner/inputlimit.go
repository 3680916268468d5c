package runner

import (
	"fmt"

	mj "github.com/mediajobs/mediajobs"
)

// inputBudget is how many bytes the next input may have after fetched bytes
// (-1: no cap), and what bounds it for the error message: the account's
// max_input_bytes or the pool's disk, whichever leaves less (docs/limits.md).
func inputBudget(m *mj.Manifest, fetched int64) (int64, string) {
	budget, why := int64(-1), ""
	if m.DiskBytes > 0 {
		budget = max(m.DiskBytes-fetched, 0)
		why = fmt.Sprintf("the %d bytes left of the pool's disk for this job (the pool's disk setting)", budget)
	}
	if m.MaxInputBytes > 0 && (budget < 0 || m.MaxInputBytes-fetched < budget) {
		budget = max(m.MaxInputBytes-fetched, 0)
		why = fmt.Sprintf("the %d bytes left of the account's max_input_bytes (%d) for this job's inputs", budget, m.MaxInputBytes)
	}
	return budget, why
}
