package gateway

import (
	"strings"
	"testing"
)

// A wrong JSON type is named in JSON's words, as the field holds it: an
// element of a list or object says so, and an object field says object.
func TestWrongTypeSaysWhatTheFieldHolds(t *testing.T) {
	for body, want := range map[string]string{
		`{"input_files":{"v":5}}`:    "input_files must be an object of strings (each value a string), not a JSON number",
		`{"output_files":[1]}`:       "output_files must be an array of strings (each element a string), not a JSON number",
		`{"metadata":{"k":true}}`:    "metadata must be an object of strings (each value a string), not a JSON bool",
		`{"output_files":"out.mp4"}`: "output_files must be an array of strings, not a JSON string",
		`{"parallel":5}`:             "parallel must be an object, not a JSON number",
		`{"timeout_seconds":"10"}`:   "timeout_seconds must be an integer, not a JSON string",
	} {
		_, err := decodeCreate([]byte(body))
		if err == nil || !strings.HasSuffix(err.Error(), ": "+want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
