package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/netguard"
)

// DefaultShutdownTimeout is server.shutdown_timeout's floor when unset (see
// Server.ShutdownTimeout).
const DefaultShutdownTimeout = 30 * time.Second

// authLimit is one pair of auth_failure settings: per client address, or for all
// of them together.
type authLimit struct {
	name              string // auth_failure or auth_failure_global
	rate              *float64
	burst             *int
	rateRng, burstRng hcl.Range
	rateDef           float64
	burstDef          int
	per, who, noLimit string // words of the messages
}

func (s *Server) authLimits() []authLimit {
	return []authLimit{
		{"auth_failure", &s.AuthFailureRate, &s.AuthFailureBurst, s.AuthRateRange, s.AuthBurstRange, 1, 20,
			"per client address", "a client address", "limit"},
		{"auth_failure_global", &s.AuthFailureGlobalRate, &s.AuthFailureGlobalBurst, s.GlobRateRange, s.GlobBurstRange, 100, 1000,
			"from all client addresses together", "all client addresses together", "global limit"},
	}
}

// jobBound is a setting that sizes a job: each at most its ceiling, so that the
// largest job record stays within etcd's request limit (see mediajobs' bounds.go).
type jobBound struct {
	v         *int
	def, ceil int
	rng       hcl.Range
	name, why string
}

func (s *Server) jobBounds() []jobBound {
	return []jobBound{
		{&s.MaxCommands, mj.DefaultMaxCommands, mj.CeilMaxCommands, s.CommandsRange, "max_commands",
			"the largest job allowed is computed with this many commands"},
		{&s.MaxCommandBytes, mj.DefaultMaxCommandBytes, mj.CeilMaxCommandBytes, s.CmdBytesRange, "max_command_bytes",
			"the commands' text is stored in the job record, beside 50 inputs of 4 KiB URLs and 1,000 output files with their probe data"},
		{&s.MaxInputs, mj.DefaultMaxInputs, mj.CeilMaxInputs, s.InputsRange, "max_inputs",
			fmt.Sprintf("each input may carry a URL of %d bytes, and %d of them already take a fifth of the job record's budget", mj.MaxURLBytes, mj.CeilMaxInputs)},
		{&s.MaxOutputs, mj.DefaultMaxOutputs, mj.CeilMaxOutputs, s.OutputsRange, "max_outputs",
			"the declared output names are stored in the job record"},
		{&s.MaxOutputFiles, mj.DefaultMaxOutputFiles, mj.CeilMaxOutputFiles, s.OutFilesRange, "max_output_files",
			"every file produced is stored in the job record with its name, key and probe, about 400 bytes each plus probe data"},
	}
}

// defaults fills what is unset: public_url from listen, and what a Config built
// in code leaves out (a file starts from Default). A 0 written in the file is
// kept, for check to report.
func (s *Server) defaults() {
	if s.PublicURL == "" {
		s.PublicURL = "http://" + s.Listen
	}
	for _, a := range s.authLimits() {
		if *a.rate == 0 && a.rateRng.Filename == "" {
			*a.rate = a.rateDef
		}
		if *a.burst == 0 && a.burstRng.Filename == "" {
			*a.burst = a.burstDef
		}
	}
	if s.MaxBodyBytes == 0 && s.BodyBytesRange.Filename == "" {
		s.MaxBodyBytes = 1 << 20
	}
	if s.MaxUploadBytes == 0 && s.UploadRange.Filename == "" {
		s.MaxUploadBytes = 8 << 30
	}
	if s.HeaderTimeout == "" && s.HeaderTORange.Filename == "" {
		s.HeaderTimeout = "10s"
	}
	if s.SessionTTL == "" && s.SessionRange.Filename == "" {
		s.SessionTTL = "12h"
	}
	for _, b := range s.jobBounds() {
		if *b.v == 0 && b.rng.Filename == "" {
			*b.v = b.def
		}
	}
}

// check reports what is wrong with the server block; it decodes the allow lists,
// parses the durations and trims public_url's trailing slash.
func (s *Server) check(ck *checker) {
	if u, err := url.Parse(s.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ck.bad(s.PublicURLRange, "Invalid public_url", fmt.Sprintf("public_url = %q must be an absolute http(s) URL that clients and workers can reach.", s.PublicURL))
	}
	s.PublicURL = strings.TrimRight(s.PublicURL, "/")
	if msg := listenProblem(s.Listen, s.ListenRange.Filename != ""); msg != "" {
		ck.bad(s.ListenRange, "Invalid listen", "listen = "+msg)
	}
	if s.MetricsListen != "" {
		if msg := listenProblem(s.MetricsListen, s.MetricsRange.Filename != ""); msg != "" {
			ck.bad(s.MetricsRange, "Invalid metrics_listen", "metrics_listen = "+msg)
		} else if s.MetricsListen == s.Listen {
			ck.bad(s.MetricsRange, "Invalid metrics_listen", fmt.Sprintf("metrics_listen = %q is listen's address: leave it unset to serve /metrics on the public port, or give it an address of its own.", s.MetricsListen))
		}
	}
	if s.RateLimit < 0 {
		ck.bad(s.RateLimitRange, "Invalid rate_limit", fmt.Sprintf("rate_limit = %g: use requests per second above 0, or 0 for no limit.", s.RateLimit))
	}
	if s.RateBurst < 0 {
		ck.bad(s.RateBurstRange, "Invalid rate_burst", fmt.Sprintf("rate_burst = %d: use the requests an account may send at once above rate_limit (at least 1).", s.RateBurst))
	}
	for _, a := range s.authLimits() {
		if *a.rate < 0 {
			ck.bad(a.rateRng, "Invalid "+a.name+"_rate", fmt.Sprintf("%s_rate = %g: use failed authentications per second %s above 0 (default %g), or 0 for no %s.", a.name, *a.rate, a.per, a.rateDef, a.noLimit))
		}
		if *a.burst < 0 {
			ck.bad(a.burstRng, "Invalid "+a.name+"_burst", fmt.Sprintf("%s_burst = %d: use the failed authentications %s may make at once (default %d).", a.name, *a.burst, a.who, a.burstDef))
		}
	}
	for _, p := range s.TrustedProxies {
		if _, err := ParseProxy(p); err != nil {
			ck.bad(s.ProxiesRange, "Invalid trusted_proxies", fmt.Sprintf("trusted_proxies: %q is neither an address nor a range such as \"10.0.0.0/8\".", p))
		}
	}
	if s.MaxBodyBytes <= 0 {
		ck.bad(s.BodyBytesRange, "Invalid max_body_bytes", fmt.Sprintf("max_body_bytes = %d must be positive (default 1048576): every create request is a JSON body.", s.MaxBodyBytes))
	}
	if s.MaxUploadBytes <= 0 {
		ck.bad(s.UploadRange, "Invalid max_upload_bytes", fmt.Sprintf("max_upload_bytes = %d must be positive (default 8589934592, 8 GiB).", s.MaxUploadBytes))
	}
	s.checkAllowLists(ck)
	for _, e := range s.ControlPlane {
		if _, _, err := netguard.SplitEndpoint(e); err != nil {
			ck.bad(s.ControlRange, "Invalid control_plane", fmt.Sprintf("control_plane: %v.", err))
		}
	}
	ck.durs(
		durSetting{&s.WaitLimitD, s.WaitLimit, s.WaitLimitRange, "wait_limit"},
		durSetting{&s.RequestTimeoutD, s.RequestTimeout, s.ReqTimeRange, "request_timeout"},
		durSetting{&s.TmpFileTTLD, s.TmpFileTTL, s.TmpTTLRange, "tmp_file_ttl"},
		durSetting{&s.UploadTimeoutD, s.UploadTimeout, s.UploadTORange, "upload_timeout"},
		durSetting{&s.HeaderTimeoutD, s.HeaderTimeout, s.HeaderTORange, "header_timeout"},
		durSetting{&s.SessionTTLD, s.SessionTTL, s.SessionRange, "session_ttl"},
	)
	if s.SessionTTLD > 0 && (s.SessionTTLD < time.Minute || s.SessionTTLD > 30*24*time.Hour) {
		ck.bad(s.SessionRange, "Invalid session_ttl", fmt.Sprintf("session_ttl = %q: a dashboard sign-in lasts from 1m to 720h (30 days); the default is 12h.", s.SessionTTL))
	}
	if s.ShutdownTimeout == "" {
		s.ShutdownD = max(DefaultShutdownTimeout, s.WaitLimitD+5*time.Second)
	} else if s.ShutdownD = ck.dur(s.ShutdownTimeout, s.ShutdownRange, "shutdown_timeout"); s.ShutdownD > 0 && s.ShutdownD < s.WaitLimitD {
		ck.bad(s.ShutdownRange, "Invalid shutdown_timeout", fmt.Sprintf("shutdown_timeout = %q is shorter than wait_limit = %q: a POST ?wait=true in flight at shutdown would be cut off; use at least wait_limit (default: the larger of 30s and wait_limit + 5s).", s.ShutdownTimeout, s.WaitLimit))
	}
	if s.SigningSecret != "" && len(s.SigningSecret) < 16 {
		ck.bad(s.SecretRange, "Signing secret too short", "signing_secret must be at least 16 characters; use a long random string.")
	}
	for _, b := range s.jobBounds() {
		if *b.v <= 0 || *b.v > b.ceil {
			ck.bad(b.rng, "Invalid "+b.name, fmt.Sprintf("%s = %d must be between 1 and %d (default %d): a job is stored as one etcd value, which etcd refuses over 1.5 MiB; %s.", b.name, *b.v, b.ceil, b.def, b.why))
		}
	}
}

// checkAllowLists decodes allow_cidrs, allow_hosts and their destination_
// counterparts, and checks every entry where it is written.
func (s *Server) checkAllowLists(ck *checker) {
	cidr := func(v string) error { _, err := netguard.ParseCIDR(v); return err }
	for _, l := range []struct {
		expr  hcl.Expression
		dst   *[]string
		name  string
		check func(string) error
	}{
		{s.AllowCIDRsExpr, &s.AllowCIDRs, "allow_cidrs", cidr},
		{s.AllowHostsExpr, &s.AllowHosts, "allow_hosts", netguard.CheckHost},
		{s.DestCIDRsExpr, &s.DestinationAllowCIDRs, "destination_allow_cidrs", cidr},
		{s.DestHostsExpr, &s.DestinationAllowHosts, "destination_allow_hosts", netguard.CheckHost},
	} {
		vals, ranges, d := stringList(l.expr)
		ck.diags = append(ck.diags, d...)
		if vals != nil {
			*l.dst = vals
		}
		for i, v := range *l.dst {
			if err := l.check(v); err != nil {
				var rng hcl.Range
				if i < len(ranges) {
					rng = ranges[i]
				}
				ck.bad(rng, "Invalid "+l.name, fmt.Sprintf("%s: %v.", l.name, err))
			}
		}
	}
}

// ParseProxy parses an entry of server.trusted_proxies: an address ("10.0.0.5")
// or a range ("10.0.0.0/8").
func ParseProxy(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
