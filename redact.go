package mediajobs

import (
	"errors"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// How a URL that may carry a secret (a signed link's signature, a password, a
// receiver's token in its path) appears where others read it: job views and
// error messages, webhooks, logs. One policy per function, and nothing else in
// the tree redacts a URL:
//
//	ShownURL        scheme://host/path: no user info, query or fragment
//	HostOnlyURL     scheme://host/…: the path cut too, for URLs that are themselves credentials
//	RedactURL       one known URL in a text, as ShownURL, and its query values and password
//	RedactError     the same in an error's text (the error itself when it does not name the URL)
//	RedactHostOnly  one known URL in a text, in every form HTTP clients quote it, as HostOnlyURL
//	RedactURLs      every URL found in a text (what ffmpeg printed), as ShownURL keeps it

// ShownURL is raw with only its scheme, host and path: no user, query or
// fragment, which may hold a signature or a token; clipped to MaxShownURLBytes.
func ShownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	return Clip(u.Scheme+"://"+u.Host+u.EscapedPath(), MaxShownURLBytes)
}

// HostOnlyURL is how a URL that may itself be a credential (a webhook
// receiver's: Zapier, Make and n8n put the secret in the path) appears in logs:
// scheme://host[:port]/… with the user info, path, query and fragment cut. A
// string that does not parse as such a URL becomes "…".
func HostOnlyURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "…"
	}
	s := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		s += "/…"
	}
	return s
}

// RedactURL removes raw's query values and its user info from s wherever they
// appear (an error message, a response body quoting the request), and raw
// itself in favour of ShownURL(raw).
func RedactURL(s, raw string) string {
	if raw == "" {
		return s
	}
	s = strings.ReplaceAll(s, raw, ShownURL(raw))
	u, err := url.Parse(raw)
	if err != nil {
		return s
	}
	if u.RawQuery != "" {
		s = strings.ReplaceAll(s, u.RawQuery, "…")
	}
	var secrets []string
	for _, vs := range u.Query() {
		secrets = append(secrets, vs...)
	}
	if p, ok := u.User.Password(); ok {
		secrets = append(secrets, p)
	}
	for _, v := range secrets {
		if len(v) >= 8 { // short values (a date, "3600") are no secret and common words
			s = strings.ReplaceAll(s, v, "[redacted]")
			if e := url.QueryEscape(v); e != v {
				s = strings.ReplaceAll(s, e, "[redacted]")
			}
		}
	}
	return s
}

// RedactError is err with raw redacted from its text (RedactURL): HTTP
// clients' errors quote the whole URL, signature included. An error whose text
// does not name raw is returned as it is, so it still unwraps.
func RedactError(err error, raw string) error {
	if err == nil || raw == "" {
		return err
	}
	msg := err.Error()
	if red := RedactURL(msg, raw); red != msg {
		return errors.New(red)
	}
	return err
}

// RedactHostOnly is s with every occurrence of raw replaced by
// HostOnlyURL(raw), in each form an HTTP client quotes it ("Post
// \"https://hooks.example/secret\": dial tcp: ..."): as given, re-serialised
// (escaping may differ), and with its password as "***".
func RedactHostOnly(s, raw string) string {
	if raw == "" {
		return s
	}
	red := HostOnlyURL(raw)
	forms := []string{raw}
	if u, err := url.Parse(raw); err == nil {
		forms = append(forms, u.String(), u.Redacted())
		if pw, ok := u.User.Password(); ok {
			forms = append(forms, strings.Replace(u.String(), pw+"@", "***@", 1))
		}
	}
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	for _, f := range forms {
		if f != "" {
			s = strings.ReplaceAll(s, f, red)
		}
	}
	return s
}

// urlRe finds URLs in a text (what ffmpeg prints: an entry of a concat list, a
// playlist).
var urlRe = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>]+`)

// RedactURLs shows each URL in s without its user info, query and fragment: an
// error message is stored, sent in webhooks and logged, and a signed link's
// signature or a password in a URL must be in none of them.
func RedactURLs(s string) string {
	return urlRe.ReplaceAllStringFunc(s, func(m string) string {
		u, err := url.Parse(m)
		if err != nil || u.Host == "" {
			if i := strings.IndexAny(m, "?#@"); i >= 0 {
				return m[:i] + "…"
			}
			return m
		}
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		return u.String()
	})
}
