package gateway

import (
	_ "embed"

	"github.com/gofiber/fiber/v2"
)

// openapiJSON is the OpenAPI 3 document of the whole API (openapi.json), served at
// /api/openapi.json without a key.
//
//go:embed openapi.json
var openapiJSON []byte

func (g *Gateway) openapi(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(openapiJSON)
}
