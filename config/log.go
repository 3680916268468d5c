package config

import (
	"fmt"

	"github.com/mediajobs/mediajobs/logging"
)

func (lg *Log) defaults() {
	if lg.Format == "" {
		lg.Format = "text"
	}
}

// check reports what is wrong with the log block and sets LevelV.
func (lg *Log) check(ck *checker) {
	if lg.Format != "text" && lg.Format != "json" {
		ck.bad(lg.FormatRange, "Invalid log format", fmt.Sprintf("format = %q; use \"text\" (key=value lines, the default) or \"json\" (one JSON object a line).", lg.Format))
	}
	if v, err := logging.ParseLevel(lg.Level); err != nil {
		ck.bad(lg.LevelRange, "Invalid log level", fmt.Sprintf("level = %q; use \"debug\", \"info\" (the default), \"warn\" or \"error\".", lg.Level))
	} else {
		lg.LevelV = v
	}
}
