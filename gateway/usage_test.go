package gateway

import (
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// GET /api/usage's range: the last 30 days by default, dates as given, and every
// bad range refused naming the field.
func TestUsageRange(t *testing.T) {
	now := time.Date(2026, 3, 10, 23, 59, 0, 0, time.FixedZone("x", -5*3600)) // 2026-03-11 in UTC
	for _, c := range []struct{ from, to, wantFrom, wantTo string }{
		{"", "", "2026-02-10", "2026-03-11"},
		{"", "2026-01-31", "2026-01-02", "2026-01-31"},
		{"2026-03-01", "", "2026-03-01", "2026-03-11"},
		{"2025-03-11", "2026-03-11", "2025-03-11", "2026-03-11"}, // 366 days
	} {
		f, to, err := usageRange(c.from, c.to, now)
		if err != nil || f != c.wantFrom || to != c.wantTo {
			t.Errorf("usageRange(%q, %q) = %s, %s, %v; want %s, %s", c.from, c.to, f, to, err, c.wantFrom, c.wantTo)
		}
	}
	for _, c := range []struct{ from, to, field string }{
		{"2026-3-01", "", "from"},
		{"", "2026-02-30", "to"},
		{"2026-03-02", "2026-03-01", "from"},
		{"2025-03-10", "2026-03-11", "from"}, // 367 days
		{"today", "2026-03-11", "from"},
	} {
		_, _, err := usageRange(c.from, c.to, now)
		e, ok := err.(*mj.Error)
		if !ok || e.Code != mj.EValidation || e.Details[c.field] == "" {
			t.Errorf("usageRange(%q, %q) = %v; want validationError naming %s", c.from, c.to, err, c.field)
		}
	}
}
