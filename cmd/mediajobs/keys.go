package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
)

// The admin commands (accounts, keys) work on a running installation: they talk to
// its etcd as a client and never start a server of their own. With the built-in
// defaults that is the embedded etcd of a running `mediajobs dev` (make run), at
// etcd.listen_client; with a config naming an etcd cluster, etcd.endpoints.

const (
	accountsUsage = "usage: mediajobs accounts create -name NAME | accounts list | accounts login-link -account NAME [-ttl 10m] [-url PUBLIC_URL] | accounts limits NAME [-max-queued-jobs N ...]   [-config FILE]"
	keysUsage     = "usage: mediajobs keys create -account NAME [-name KEY_NAME] | keys list -account NAME | keys revoke -account NAME -key ID_OR_PREFIX [-force]   [-config FILE]"
)

// accountName is what an account may be called.
var accountName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// adminEndpoints are the etcd client URLs the admin commands dial: the configured
// cluster, or the embedded server's client address (whose wildcard host means this
// machine).
func adminEndpoints(cfg *config.Config) ([]string, error) {
	if !cfg.Etcd.Embedded {
		return cfg.Etcd.Endpoints, nil
	}
	host, port, err := net.SplitHostPort(cfg.Etcd.ListenClient)
	if err != nil || port == "0" {
		return nil, fmt.Errorf("etcd.listen_client = %q names no fixed address to reach the embedded etcd at", cfg.Etcd.ListenClient)
	}
	if a, err := netip.ParseAddr(host); host == "" || (err == nil && a.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return []string{"http://" + net.JoinHostPort(host, port)}, nil
}

// adminStore opens the store of the running installation cfg describes, and
// proves etcd answers before returning it.
func adminStore(ctx context.Context, cfg *config.Config) (*store.Store, func(), error) {
	eps, err := adminEndpoints(cfg)
	if err != nil {
		return nil, nil, err
	}
	s, closeFn, err := store.Dial(store.DialOptions{
		Endpoints: eps, DialTimeout: cfg.Etcd.DialTimeoutD,
		Username: cfg.Etcd.Username, Password: cfg.Etcd.Password,
	}, cfg.Etcd.Prefix)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeoutD)
	defer cancel()
	if err := s.Ping(pctx); err != nil {
		closeFn()
		hint := "is `mediajobs dev` (make run) running? For another installation pass its -config, whose etcd.endpoints name its etcd cluster"
		if !cfg.Etcd.Embedded {
			hint = "is the etcd cluster up, and are etcd.endpoints (and username/password) in the config right?"
		}
		return nil, nil, fmt.Errorf("cannot reach etcd at %s (%v): %s", strings.Join(eps, ", "), err, hint)
	}
	return s, closeFn, nil
}

// adminOpen parses an admin subcommand's flags and opens the store.
func adminOpen(ctx context.Context, fs *flag.FlagSet, args []string) (*store.Store, func(), error) {
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return nil, nil, err
	}
	return adminStore(ctx, cfg)
}

// maxLoginLinkTTL bounds how long a sign-in link may stay usable.
const maxLoginLinkTTL = time.Hour

// runAccounts: `mediajobs accounts create -name NAME`, `accounts list` and
// `accounts login-link -account NAME`.
func runAccounts(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(accountsUsage)
	}
	fs := flag.NewFlagSet("accounts "+args[0], flag.ContinueOnError)
	fs.SetOutput(stdout)
	switch args[0] {
	case "create":
		name := fs.String("name", "", "the account's name, unique (required)")
		s, done, err := adminOpen(ctx, fs, args[1:])
		if err != nil {
			return err
		}
		defer done()
		if !accountName.MatchString(*name) {
			return fmt.Errorf("-name %q: an account name is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit", *name)
		}
		a, err := s.CreateAccount(ctx, *name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "account %s (%s) created\nGive it an API key: mediajobs keys create -account %s\n", a.Name, a.ID, a.Name)
		return nil
	case "list":
		s, done, err := adminOpen(ctx, fs, args[1:])
		if err != nil {
			return err
		}
		defer done()
		accounts, err := s.ListAccounts(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tID\tCREATED")
		for _, a := range accounts {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Name, a.ID, a.CreatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	case "login-link":
		return runLoginLink(ctx, fs, args[1:], stdout)
	case "limits":
		return runAccountLimits(ctx, fs, args[1:], stdout) // limits.go
	}
	return errors.New(accountsUsage)
}

// runLoginLink: `mediajobs accounts login-link -account NAME [-ttl 10m] [-url URL]`
// prints a one-time dashboard sign-in link for the account. Only the token's hash
// is stored, under an etcd lease of -ttl; the link works once.
func runLoginLink(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	cfgPath := configFlag(fs)
	acct := fs.String("account", "", "the account's name (required)")
	ttl := fs.Duration("ttl", 10*time.Minute, "how long the link works, at most 1h")
	base := fs.String("url", "", "the dashboard's public base URL (default: the config's server.public_url)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *acct == "":
		return errors.New("-account is required")
	case *ttl <= 0 || *ttl > maxLoginLinkTTL:
		return fmt.Errorf("-ttl %s: a sign-in link works for more than 0s and at most %s", *ttl, maxLoginLinkTTL)
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	public := *base
	if public == "" {
		public = cfg.Server.PublicURL
		// As `mediajobs dev` does: MEDIAJOBS_HTTP_ADDR moves a derived public URL.
		if addr := os.Getenv("MEDIAJOBS_HTTP_ADDR"); addr != "" && public == "http://"+cfg.Server.Listen {
			public = "http://" + addr
		}
	}
	if u, err := url.Parse(public); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-url %q: give the dashboard's absolute http(s) base URL, such as https://media.example.com", public)
	}
	s, done, err := adminStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()
	a, err := accountNamed(ctx, s, *acct)
	if err != nil {
		return err
	}
	token, _, err := s.CreateLoginToken(ctx, a.ID, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s/dashboard/login?token=%s\n", strings.TrimRight(public, "/"), token)
	return nil
}

// runKeys: `mediajobs keys create|list|revoke -account NAME`. create makes the
// account first when there is none of that name, and prints the secret once (only
// its hash is stored; it is never logged).
func runKeys(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		return errors.New(keysUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stdout)
	cfgPath := configFlag(fs)
	acct := fs.String("account", "", "the account's name (required)")
	var keyName, which *string
	var force *bool
	switch sub {
	case "create":
		keyName = fs.String("name", "default", "a name for the key")
	case "revoke":
		which = fs.String("key", "", "the key: its id, the start of its id (at least 4 characters) or its prefix as listed (required)")
		force = fs.Bool("force", false, "also revoke the account's last key (it then has no API access until a new key is created)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *acct == "":
		return errors.New("-account is required")
	case which != nil && *which == "":
		return errors.New("-key is required")
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	s, done, err := adminStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer done()

	if sub == "create" {
		a, err := s.AccountByName(ctx, *acct)
		created := false
		if errors.Is(err, mj.ErrNotFound) {
			if !accountName.MatchString(*acct) {
				return fmt.Errorf("-account %q: an account name is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit", *acct)
			}
			a, err = s.CreateAccount(ctx, *acct)
			created = err == nil
		}
		if err != nil {
			return err
		}
		secret := mj.NewAPIKeySecret()
		k, err := s.AddAPIKey(ctx, a.ID, *keyName, secret)
		if err != nil {
			return err
		}
		state := "created"
		if !created {
			// Names are unique: a second customer given the same name would get a
			// key to the first one's account. Say so plainly.
			state = fmt.Sprintf("EXISTING account, created %s: this key opens its jobs", a.CreatedAt.Format("2006-01-02"))
		}
		fmt.Fprintf(stdout, "account %s (%s, %s)\nkey     %s (%s)\nsecret  %s\n\nThe secret is shown only now; only its hash is stored.\n", a.Name, a.ID, state, k.Name, k.ID, secret)
		return nil
	}

	a, err := accountNamed(ctx, s, *acct)
	if err != nil {
		return err
	}
	keys, err := s.ListAPIKeys(ctx, a.ID)
	if err != nil {
		return err
	}
	if sub == "list" {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tCREATED\tLAST USED")
		for _, k := range keys {
			used := "never"
			if k.LastUsed != nil {
				used = k.LastUsed.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\n", k.ID, k.Name, k.Prefix, k.CreatedAt.Format(time.RFC3339), used)
		}
		return tw.Flush()
	}

	// revoke
	v := strings.TrimSuffix(*which, "…")
	var match []*mj.APIKey
	for _, k := range keys {
		if k.ID == v || k.Hash == mj.HashAPIKey(v) || (len(v) >= 4 && (strings.HasPrefix(k.ID, v) || strings.HasPrefix(k.Prefix, v))) {
			match = append(match, k)
		}
	}
	switch len(match) {
	case 0:
		return fmt.Errorf("account %s has no key matching %q (see mediajobs keys list -account %s)", a.Name, *which, a.Name)
	case 1:
	default:
		ids := make([]string, len(match))
		for i, k := range match {
			ids[i] = k.ID
		}
		return fmt.Errorf("%q matches %d keys of account %s (%s); give more of the id", *which, len(match), a.Name, strings.Join(ids, ", "))
	}
	k := match[0]
	if *force {
		err = s.RevokeAnyAPIKey(ctx, a.ID, k.ID)
	} else {
		err = s.RevokeAPIKey(ctx, a.ID, k.ID)
	}
	var me *mj.Error
	if errors.As(err, &me) && me.Code == mj.EConflict {
		return fmt.Errorf("%v (or revoke it anyway with -force)", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "key %s (%s, %s…) of account %s revoked\n", k.ID, k.Name, k.Prefix, a.Name)
	return nil
}

// accountNamed finds an account by name, with an error that says what to do.
func accountNamed(ctx context.Context, s *store.Store, name string) (*mj.Account, error) {
	a, err := s.AccountByName(ctx, name)
	if errors.Is(err, mj.ErrNotFound) {
		return nil, fmt.Errorf("no account named %q (see mediajobs accounts list)", name)
	}
	return a, err
}
