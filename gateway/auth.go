package gateway

import (
	"strings"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
)

const localAccount = "account"

// authenticate resolves "Authorization: Bearer <key>" to the key's account. Keys
// are looked up by their SHA-256 hash; the secret is never stored.
func (g *Gateway) authenticate(c *fiber.Ctx) error {
	h := c.Get(fiber.HeaderAuthorization)
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return mj.Errorf(mj.EBadAPIKey, "missing API key: send the header \"Authorization: Bearer <API_KEY>\"")
	}
	k, err := g.Store.APIKeyByHash(c.UserContext(), mj.HashAPIKey(secret))
	if mj.ErrorCode(err) == mj.ENotFound {
		return mj.Errorf(mj.EBadAPIKey, "invalid or revoked API key")
	}
	if err != nil {
		return err
	}
	c.Locals(localAccount, k.AccountID)
	return c.Next()
}

func account(c *fiber.Ctx) string { return c.Locals(localAccount).(string) }
