package command

//go:generate go run ./internal/genoptions -o options_gen.go

// optKind says how ffmpeg reads an option (options_gen.go): or'ed flags.
type optKind uint8

const (
	optMain     optKind = 1 << iota // a main option of ffmpeg's own table (else an AVOption)
	optArg                          // takes a value: the next word
	optBool                         // OPT_BOOL: -noX is accepted too (as X set to 0, no value)
	optExit                         // prints information and exits (-h, -formats): refused
	optAV                           // an AVOption of a codec, format, protocol, scaler or bsf
	optFilterAV                     // a filter's AVOption (ffmpeg refuses it as a command-line option)
)
