package main

import (
	"context"
	"fmt"
	"io"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	"github.com/spf13/cobra"
)

// The subcommands that jobs and pipelines share (get, wait, cancel, the list's
// paging line), written once over what differs: how the client reads, follows
// and cancels one of them.

// getCmd is "get ID": one noun, as JSON.
func getCmd[T any](api *apiFlags, noun string, get func(context.Context, *client.Client, string) (T, error)) *cobra.Command {
	return &cobra.Command{
		Use: "get ID", Short: "one " + noun + ", as JSON", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			v, err := get(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), v)
		},
	}
}

// waitCmd is "wait ID": follow drives the progress display until the noun
// ends; ended says whether it succeeded (nil) or how the command exits.
func waitCmd[T any](api *apiFlags, noun string, follow func(context.Context, *client.Client, string, *progressUI) (T, error), ended func(T) error) *cobra.Command {
	var asJSON bool
	wait := &cobra.Command{
		Use: "wait ID", Short: "follow a " + noun + " until it ends (exit 0 if it succeeded, 1 if not)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				out = cmd.ErrOrStderr()
			}
			ui := newProgress(out)
			v, err := follow(cmd.Context(), c, args[0], ui)
			ui.close()
			if err != nil {
				if cmd.Context().Err() != nil {
					return &exitError{130, "interrupted; the " + noun + " goes on"}
				}
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), v)
			}
			return ended(v)
		},
	}
	wait.Flags().BoolVar(&asJSON, "json", false, "print the final "+noun+" as JSON on stdout")
	return wait
}

// cancelCmd is "cancel ID"; state reads what the cancel answered (ok false
// when it answered nothing).
func cancelCmd[T any](api *apiFlags, noun, short string, cancel func(context.Context, *client.Client, string) (T, error), state func(T) (id string, st mj.Status, ok bool)) *cobra.Command {
	return &cobra.Command{
		Use: "cancel ID", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.client()
			if err != nil {
				return err
			}
			v, err := cancel(cmd.Context(), c, args[0])
			id, st, ok := state(v)
			if err != nil && ok && st == mj.StatusCancelled {
				err = nil // a retry of a cancel that went through
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s\n", noun, id, st)
			return nil
		},
	}
}

// listFlags adds the paging flags (and -json) every list takes.
func listFlags(cmd *cobra.Command, limit, offset *int, asJSON *bool) {
	cmd.Flags().IntVar(limit, "limit", 20, "at most this many (1–100)")
	cmd.Flags().IntVar(offset, "offset", 0, "skip this many")
	cmd.Flags().BoolVar(asJSON, "json", false, "print JSON")
}

// morePages tells, on w, how to see the rest of a list.
func morePages(w io.Writer, shown, total, offset int, hasMore bool) {
	if hasMore {
		fmt.Fprintf(w, "%d of %d shown; -offset %d for more\n", shown, total, offset+shown)
	}
}
