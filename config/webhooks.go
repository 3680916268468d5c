package config

import "fmt"

// defaults sets concurrency (128) and account_concurrency (an eighth of it)
// when unset, and brings an account_concurrency above concurrency, set in code,
// down to that. What the file writes is kept, for check to report.
func (w *Webhooks) defaults() {
	if w.Concurrency == 0 && w.ConcRange.Filename == "" {
		w.Concurrency = 128
	}
	if w.AcctRange.Filename == "" && (w.AccountConcurrency == 0 || w.AccountConcurrency > w.Concurrency) {
		w.AccountConcurrency = max(1, w.Concurrency/8)
	}
}

// check reports what is wrong with the webhooks block and parses its durations.
func (w *Webhooks) check(ck *checker) {
	ck.durs(
		durSetting{&w.BaseD, w.BackoffBase, w.BaseRange, "backoff_base"},
		durSetting{&w.CapD, w.BackoffCap, w.CapRange, "backoff_cap"},
		durSetting{&w.TimeoutD, w.AttemptTimeout, w.TimeoutRange, "attempt_timeout"},
	)
	if w.Concurrency <= 0 {
		ck.bad(w.ConcRange, "Invalid concurrency", fmt.Sprintf("concurrency = %d: webhook attempts in flight at once must be at least 1 (default 128).", w.Concurrency))
	}
	if w.AccountConcurrency < 0 || (w.AcctRange.Filename != "" && (w.AccountConcurrency == 0 || w.AccountConcurrency > max(w.Concurrency, 1))) {
		ck.bad(w.AcctRange, "Invalid account_concurrency", fmt.Sprintf("account_concurrency = %d must be between 1 and concurrency (%d); default an eighth of concurrency.", w.AccountConcurrency, w.Concurrency))
	}
}
