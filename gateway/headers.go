package gateway

import (
	"bytes"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// defaultCSP is the Content-Security-Policy of an HTML answer that sets none of its
// own: it may load and run nothing, and be framed nowhere. The pages the gateway
// serves (the dashboard, /api/docs) set their own.
const defaultCSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// securityHeaders, the outermost middleware, adds to every answer what keeps a
// browser from misreading it: no MIME sniffing, no Referer (links carry signatures
// and sign-in tokens), no framing, and a strict policy for HTML. A file download
// (user content, served as an attachment) gets nosniff only. A header the handler
// set is kept.
func securityHeaders(c *fiber.Ctx) error {
	err := c.Next() // accessLog, next in line, has answered any error
	h := &c.Response().Header
	set := func(k, v string) {
		if len(h.Peek(k)) == 0 {
			h.Set(k, v)
		}
	}
	set(fiber.HeaderXContentTypeOptions, "nosniff")
	if m := c.Method(); strings.HasPrefix(c.Path(), "/files/") && (m == fiber.MethodGet || m == fiber.MethodHead) {
		return err
	}
	set(fiber.HeaderReferrerPolicy, "no-referrer")
	set(fiber.HeaderXFrameOptions, "DENY")
	if ct := h.ContentType(); len(ct) >= len("text/html") && bytes.EqualFold(ct[:len("text/html")], []byte("text/html")) {
		set(fiber.HeaderContentSecurityPolicy, defaultCSP)
	}
	return err
}
