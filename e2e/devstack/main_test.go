// Package devstack holds the end-to-end tests of the API, the CLI, the dashboard
// and MCP against one `mediajobs dev` stack on one Nomad agent, shared by all of
// them (e2e.Main). Tests that own their jobs call t.Parallel; those that list or
// count the dev account's jobs do not, so they run first, alone (go test runs
// parallel tests after the serial ones), and see no other test's jobs.
package devstack

import (
	"flag"
	"os"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(e2e.Main(m, e2e.Options{DevStack: true}))
}
