package gateway

import (
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/store"
)

// The store and bucket this package is given in production, checked when it
// compiles: a renamed method breaks the build instead of turning a feature off.
var (
	_ Store = (*store.Store)(nil)
	_ Blobs = (*blob.Bucket)(nil)
)
