package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/mediajobs/mediajobs/netguard"
)

// checker collects the problems the blocks' check methods find, each at the
// range it is written (or the block's, or none for a Config built in code), in
// the order found.
type checker struct {
	diags hcl.Diagnostics
}

func (ck *checker) bad(rng hcl.Range, summary, detail string) {
	ck.diags = append(ck.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &rng})
}

// dur parses a duration setting, which must be positive.
func (ck *checker) dur(s string, rng hcl.Range, name string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		ck.bad(rng, "Invalid duration", fmt.Sprintf("%s = %q is not a positive duration such as \"30s\", \"10m\" or \"1h\".", name, s))
	}
	return d
}

// durSetting is a duration setting as written and where its parsed value goes.
type durSetting struct {
	dst  *time.Duration
	s    string
	rng  hcl.Range
	name string
}

// durs parses a block's duration settings, in order.
func (ck *checker) durs(ds ...durSetting) {
	for _, d := range ds {
		*d.dst = ck.dur(d.s, d.rng, d.name)
	}
}

// stringList decodes a list-of-strings attribute kept as an expression, with the
// range of each element (the attribute's own where the list is not written out).
func stringList(expr hcl.Expression) ([]string, []hcl.Range, hcl.Diagnostics) {
	if expr == nil {
		return nil, nil, nil
	}
	v, diags := expr.Value(evalContext())
	if diags.HasErrors() || v.IsNull() {
		return nil, nil, diags
	}
	var out []string
	if diags := gohcl.DecodeExpression(expr, evalContext(), &out); diags.HasErrors() {
		return nil, nil, diags
	}
	ranges := make([]hcl.Range, len(out))
	tuple, _ := expr.(*hclsyntax.TupleConsExpr)
	for i := range out {
		ranges[i] = expr.Range()
		if tuple != nil && i < len(tuple.Exprs) {
			ranges[i] = tuple.Exprs[i].Range()
		}
	}
	return out, ranges, nil
}

// listenProblem says what is wrong with a host:port to listen on, or "".
// fromFile: port 0 (any free port) is for code, not for a file others dial.
func listenProblem(addr string, fromFile bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("%q is not host:port, such as \"127.0.0.1:8080\" or \":8080\" (all interfaces).", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && fromFile) {
		return fmt.Sprintf("%q: port %q must be a number from 1 to 65535.", addr, port)
	}
	if host != "" && !strings.EqualFold(host, "localhost") {
		if _, err := netip.ParseAddr(host); err != nil && netguard.CheckHost(host) != nil {
			return fmt.Sprintf("%q: %q is neither an IP address nor a host name.", addr, host)
		}
	}
	return ""
}
