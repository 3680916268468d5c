package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// usageReader is what the store tells of an account's metered usage
// (docs/usage.md); *store.Store has it.
type usageReader interface {
	AccountUsage(ctx context.Context, account, from, to string) (store.UsageReport, error)
}

// Usage ranges: the last usageDefaultDays days by default, at most usageMaxDays.
const (
	usageDefaultDays = 30
	usageMaxDays     = 366
)

// getUsage: GET /api/usage?from=YYYY-MM-DD&to=YYYY-MM-DD, the account's usage per
// UTC day and pool, and its total (docs/api.md).
func (g *Gateway) getUsage(c *fiber.Ctx) error {
	from, to, err := usageRange(c.Query("from"), c.Query("to"), time.Now())
	if err != nil {
		return err
	}
	r, err := g.Store.AccountUsage(c.UserContext(), account(c), from, to)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": fiber.Map{"from": from, "to": to, "days": r.Days, "total": r.Total}})
}

// usageRange checks a usage request's days: to defaults to today (UTC), from
// to the usageDefaultDays days that end at to; from ≤ to, at most usageMaxDays.
func usageRange(from, to string, now time.Time) (string, string, error) {
	bad := map[string]string{}
	day := func(field, s string, def time.Time) time.Time {
		if s == "" {
			return def
		}
		d, err := time.Parse(store.DayLayout, s)
		if err != nil || d.Format(store.DayLayout) != s {
			bad[field] = "must be a date, YYYY-MM-DD"
		}
		return d
	}
	t := day("to", to, now.UTC().Truncate(24*time.Hour))
	f := day("from", from, t.AddDate(0, 0, 1-usageDefaultDays))
	switch {
	case len(bad) > 0:
	case f.After(t):
		bad["from"] = "must not be after to"
	case t.Sub(f) >= usageMaxDays*24*time.Hour:
		bad["from"] = fmt.Sprintf("the range may span at most %d days", usageMaxDays)
	}
	if len(bad) > 0 {
		return "", "", &mj.Error{Code: mj.EValidation, Message: "bad usage range: from and to are UTC dates, YYYY-MM-DD, from ≤ to, at most " + fmt.Sprint(usageMaxDays) + " days", Details: bad}
	}
	return f.Format(store.DayLayout), t.Format(store.DayLayout), nil
}
