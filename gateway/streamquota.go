package gateway

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"github.com/mediajobs/mediajobs/store"
)

// streamLimiter counts an account's open event streams across gateways
// (docs/limits.md); *store.Store has it.
type streamLimiter interface {
	OpenStream(ctx context.Context, account string, defaults store.Limits) (func(), error)
}

// openStream counts one more event stream of the caller's account, refused with
// quotaExceeded at its max_event_streams; the returned func ends it.
func (g *Gateway) openStream(c *fiber.Ctx) (func(), error) {
	return g.Store.OpenStream(c.UserContext(), account(c), g.limitDefaults())
}
