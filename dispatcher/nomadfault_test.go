package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
)

// classify tells each kind of Nomad answer apart, in its order: an outage before
// a missing parent job, before the request's own trouble.
func TestClassifyNomadErrors(t *testing.T) {
	code := func(c int, msg string) error { return fmt.Errorf("Unexpected response code: %d (%s)", c, msg) }
	for _, tc := range []struct {
		err  error
		want nomadFault
	}{
		{nil, faultNone},
		{&url.Error{Op: "Put", URL: "http://nomad:4646", Err: errors.New("connection refused")}, faultOutage},
		{context.DeadlineExceeded, faultOutage},
		{code(503, "service unavailable"), faultOutage},
		{code(500, "rpc error: No cluster leader"), faultOutage},
		{code(404, "job not found"), faultParentGone},
		{code(500, `parameterized job "mediajobs-cpu" is stopped`), faultParentGone},
		{code(403, "Permission denied"), faultAuth},
		{code(400, "ACL token expired"), faultAuth},
		{code(429, "slow down"), faultThrottled},
		{code(400, "invalid meta"), faultRefused},
		{code(500, "dispatch payload exceeds maximum size"), faultRefused},
		{errors.New("boom"), faultOther},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
		if refusedByNomad(tc.err) != (tc.want == faultRefused) || nomadTrouble(tc.err) != (tc.want == faultOutage) {
			t.Errorf("%v: refused %v, outage %v; want %d", tc.err, refusedByNomad(tc.err), nomadTrouble(tc.err), tc.want)
		}
	}
}
