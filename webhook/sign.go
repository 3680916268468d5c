package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// Sign is the webhook signature: hex HMAC-SHA256 of "<timestamp>.<body>" with the
// account's secret. Receivers recompute it and compare in constant time.
func Sign(secret, timestamp string, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(timestamp + "."))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}
