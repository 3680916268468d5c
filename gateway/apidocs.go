package gateway

import (
	_ "embed"

	"github.com/gofiber/fiber/v2"
)

// redocJS is Redoc's standalone bundle (apidocs/README.md), served from the binary:
// the reference page makes no request beyond this gateway.
//
//go:embed apidocs/redoc.standalone.js
var redocJS []byte

const redocVersion = "2.5.1"

const apiDocsPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mediajobs API reference</title>
</head>
<body>
<redoc spec-url="/api/openapi.json"></redoc>
<script src="/api/docs/redoc.standalone.js?v=` + redocVersion + `"></script>
</body>
</html>
`

// apiDocsCSP allows what Redoc needs and nothing from elsewhere: its script, the
// styles it injects, its search worker (a blob: URL) and the document it fetches.
const apiDocsCSP = "default-src 'none'; script-src 'self' blob:; worker-src blob:; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// apiDocs serves the readable API reference (GET /api/docs), without a key.
func (g *Gateway) apiDocs(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentSecurityPolicy, apiDocsCSP)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return c.SendString(apiDocsPage)
}

// apiDocsAsset serves Redoc's bundle; the version in its URL lets it be cached.
func (g *Gateway) apiDocsAsset(c *fiber.Ctx) error {
	if c.Params("asset") != "redoc.standalone.js" {
		return fiber.ErrNotFound
	}
	c.Set(fiber.HeaderContentType, "text/javascript; charset=utf-8")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderCacheControl, "public, max-age=86400")
	return c.Send(redocJS)
}
