package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	mj "github.com/mediajobs/mediajobs"
)

// runKeys: `mediajobs keys create -account NAME [-name KEYNAME]` creates an account
// and its first API key in etcd and prints the secret once.
func runKeys(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("usage: mediajobs keys create -account NAME [-name KEY_NAME] [-config FILE]")
	}
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	acct := fs.String("account", "", "name of the new account (required)")
	name := fs.String("name", "default", "a name for the key")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *acct == "" {
		return errors.New("-account is required")
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	cfg.Server.SigningSecret = "not-used-by-keys-create" // no links are signed here
	b, err := openBackends(cfg, "")
	if err != nil {
		return err
	}
	defer b.close()
	a, err := b.store.CreateAccount(ctx, *acct)
	if err != nil {
		return err
	}
	secret := mj.NewAPIKeySecret()
	k, err := b.store.AddAPIKey(ctx, a.ID, *name, secret)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "account %s (%s)\nkey     %s (%s)\nsecret  %s\n\nThe secret is shown only now; only its hash is stored.\n", a.Name, a.ID, k.Name, k.ID, secret)
	return nil
}
