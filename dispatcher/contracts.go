package dispatcher

import "github.com/mediajobs/mediajobs/store"

// The store upgrades this package takes at run time (d.Store.(fairStore),
// d.Store.(warmStore)), checked when it compiles: a renamed store method
// breaks the build instead of turning fair share or warm pools off.
var (
	_ fairStore = (*store.Store)(nil)
	_ warmStore = (*store.Store)(nil)
)
