package gateway

import (
	"embed"
	"net/url"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// The dashboard (/dashboard/) is a page and a small script over the JSON API,
// embedded in the binary: nothing is fetched from elsewhere. Its session
// endpoints and cookie auth are in session.go.
//
//go:embed dashboard/index.html dashboard/app.js dashboard/app.css
var dashboardFiles embed.FS

// dashboardCSP allows the page's own script and style, the API on this origin,
// and media and uploads on the origins signed links point at (public_url; the
// bucket's endpoint with S3 storage).
func (g *Gateway) dashboardCSP() string {
	g.cspOnce.Do(func() {
		origins := map[string]bool{}
		add := func(raw string) {
			if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
				origins[u.Scheme+"://"+u.Host] = true
			}
		}
		add(g.Config.Server.PublicURL)
		if su, err := url.Parse(g.Config.Storage.URL); err == nil && su.Scheme == "s3" {
			if ep := su.Query().Get("endpoint"); ep != "" {
				add(ep)
			} else {
				origins["https://*.amazonaws.com"] = true
			}
		}
		extra := ""
		for o := range origins {
			extra += " " + o
		}
		g.csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:" + extra +
			"; media-src 'self' blob:" + extra + "; connect-src 'self'" + extra +
			"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	})
	return g.csp
}

// dashboard serves GET /dashboard/ (the page) and /dashboard/assets/<file>.
func (g *Gateway) dashboard(c *fiber.Ctx) error {
	name := "index.html"
	if rest := c.Params("*"); rest != "" {
		name = path.Base(rest)
	}
	b, err := dashboardFiles.ReadFile("dashboard/" + name)
	if err != nil {
		return fiber.ErrNotFound
	}
	c.Set(fiber.HeaderContentSecurityPolicy, g.dashboardCSP())
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	c.Set(fiber.HeaderCacheControl, "no-cache") // revalidated: a new binary serves a new script
	switch {
	case strings.HasSuffix(name, ".js"):
		c.Set(fiber.HeaderContentType, "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		c.Set(fiber.HeaderContentType, "text/css; charset=utf-8")
	default:
		c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	}
	return c.Send(b)
}
