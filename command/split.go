package command

import (
	"errors"
	"strings"
)

// Split splits s into words the way a POSIX shell does, without expansion: blanks
// separate words; single quotes keep everything literally; double quotes keep
// everything but \" \\ \$ \` and line continuation; a backslash outside quotes
// escapes the next character. Nothing else (no $VAR, globs, pipes) is special:
// the words go straight to ffmpeg.
func Split(s string) ([]string, error) {
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		runes   = []rune(s)
		errQuot = errors.New("unbalanced quotes")
	)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '\\':
			if i+1 >= len(runes) {
				return nil, errors.New("trailing backslash")
			}
			i++
			if runes[i] != '\n' { // backslash-newline is a line continuation
				cur.WriteRune(runes[i])
				inWord = true
			}
		case r == '\'':
			inWord = true
			j := i + 1
			for j < len(runes) && runes[j] != '\'' {
				j++
			}
			if j >= len(runes) {
				return nil, errQuot
			}
			cur.WriteString(string(runes[i+1 : j]))
			i = j
		case r == '"':
			inWord = true
			i++
			for ; i < len(runes) && runes[i] != '"'; i++ {
				if runes[i] == '\\' && i+1 < len(runes) {
					switch runes[i+1] {
					case '"', '\\', '$', '`':
						i++
					case '\n':
						i++
						continue
					}
				}
				cur.WriteRune(runes[i])
			}
			if i >= len(runes) {
				return nil, errQuot
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
