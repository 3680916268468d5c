package mediajobs

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"math/big"
)

// APIKeyPrefixLen is how much of a secret is kept in clear, to tell keys apart.
const APIKeyPrefixLen = 8

// NewAPIKeySecret returns a new random key: "mj_" + 40 base62 characters (238 bits).
func NewAPIKeySecret() string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 40)
	for i := range b {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			panic(err) // crypto/rand never fails on Linux
		}
		b[i] = alphabet[n.Int64()]
	}
	return "mj_" + string(b)
}

// HashAPIKey is how a key is stored and looked up. Keys are long random strings, so
// a plain SHA-256 is enough: there is nothing to brute-force.
func HashAPIKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}
