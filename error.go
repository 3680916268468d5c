// Package mediajobs holds the domain every other package talks through: the job model
// and its state machine, accounts and API keys, and the error vocabulary. It imports
// nothing of the project; gateway, dispatcher, runner and store import it.
package mediajobs

import (
	"errors"
	"fmt"
)

// Error codes of the public API (DESIGN.md §2). The gateway maps each to one HTTP status.
const (
	EValidation      = "validationError"
	EBadAPIKey       = "badApiKey"
	EForbidden       = "forbidden"
	ENotFound        = "notFound"
	EConflict        = "conflict"
	EPayloadTooLarge = "payloadTooLarge"
	ETooManyRequests = "tooManyRequests"
	// EQuotaExceeded: the request would take an account past one of its limits
	// (docs/limits.md); Details name the limit, its value and the use.
	EQuotaExceeded = "quotaExceeded"
	EInternal      = "unknownError"
	EUnavailable   = "unavailable"
)

// Error is a domain error a client may see. Anything that is not an *Error is an
// internal error and reaches the client only as "unknownError".
type Error struct {
	Code    string
	Message string
	// Details maps a field path (e.g. "ffmpeg_commands[0]") to what is wrong with it.
	Details map[string]string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, or EInternal when err is not a domain error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrNotFound is returned by stores for a missing job, key or account.
var ErrNotFound = &Error{Code: ENotFound, Message: "not found"}
