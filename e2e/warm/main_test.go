// Package warm holds the end-to-end tests of a warm pool (docs/warm.md): the dev
// stack's pool e2e.WarmPool, whose two runners the tests count, kill and scale,
// so they run one at a time.
package warm

import (
	"flag"
	"os"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(e2e.Main(m, e2e.Options{DevStack: true, WarmPool: true}))
}
