package gateway

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
)

// keyView is an API key as listed: never the secret, only its first characters.
type keyView struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	Secret     string     `json:"secret,omitempty"` // only in the response that creates it
}

func viewKey(k *mj.APIKey) keyView {
	return keyView{ID: k.ID, Name: k.Name, Prefix: k.Prefix, CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsed}
}

func (g *Gateway) listKeys(c *fiber.Ctx) error {
	keys, err := g.Store.ListAPIKeys(c.UserContext(), account(c))
	if err != nil {
		return err
	}
	views := make([]keyView, len(keys))
	for i, k := range keys {
		views[i] = viewKey(k)
	}
	return c.JSON(fiber.Map{"data": views})
}

func (g *Gateway) createKey(c *fiber.Ctx) error {
	body, err := g.jsonBody(c)
	if err != nil {
		return err
	}
	var req struct {
		Name string `json:"name"`
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			return mj.Errorf(mj.EValidation, "request body must be {\"name\": \"...\"}: %v", err)
		}
	}
	if req.Name == "" {
		req.Name = "key"
	}
	if len(req.Name) > 100 {
		e := mj.Errorf(mj.EValidation, "name: at most 100 characters")
		e.Details = map[string]string{"name": "too long"}
		return e
	}
	secret := mj.NewAPIKeySecret()
	k, err := g.Store.AddAPIKey(c.UserContext(), account(c), req.Name, secret)
	if err != nil {
		return err
	}
	g.badKeys.forget(k.Hash) // works at once, even if tried here before (authlimit.go)
	v := viewKey(k)
	v.Secret = secret
	return c.JSON(fiber.Map{"data": v})
}

func (g *Gateway) revokeKey(c *fiber.Ctx) error {
	id := c.Params("id")
	// One index entry, however many keys the account has (store/keys.go).
	hash, err := g.Store.APIKeyHash(c.UserContext(), account(c), id)
	if err != nil {
		return err
	}
	if err := g.Store.RevokeAPIKey(c.UserContext(), account(c), id); err != nil {
		return err
	}
	g.keys.drop(hash)
	return c.JSON(fiber.Map{"data": fiber.Map{"id": id, "revoked": true}})
}

// setWebhookSecret creates (or rotates) the account's webhook signing secret and
// shows it once; from then on every webhook carries X-Mediajobs-Signature.
func (g *Gateway) setWebhookSecret(c *fiber.Ctx) error {
	secret := "whsec_" + strings.TrimPrefix(mj.NewAPIKeySecret(), "mj_")
	if err := g.Store.SetWebhookSecret(c.UserContext(), account(c), secret); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": fiber.Map{"secret": secret}})
}

// deleteWebhookSecret stops signing the account's webhooks.
func (g *Gateway) deleteWebhookSecret(c *fiber.Ctx) error {
	if err := g.Store.SetWebhookSecret(c.UserContext(), account(c), ""); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": fiber.Map{"secret": nil}})
}
