package config

import (
	"strings"
	"testing"
)

func TestStorageURL(t *testing.T) {
	for _, ok := range []string{
		"file:///var/lib/mediajobs/blobs",
		"s3://media?region=us-east-1",
		"s3://media?region=us-east-1&endpoint=http://127.0.0.1:9000&use_path_style=true",
	} {
		if c, err := Parse([]byte("storage {\n  url = \""+ok+"\"\n}\n"), "s.hcl"); err != nil || c.Storage.URL != ok {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"file://relative/dir":            "absolute directory",
		"s3://?region=us-east-1":         "names its bucket",
		"gs://media":                     "not supported",
		"s3://key:secret@media?region=x": "no credentials",
	} {
		_, err := Parse([]byte("storage {\n  url = \""+bad+"\"\n}\n"), "s.hcl")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "s.hcl:2") {
			t.Errorf("%s: %v, want %q at s.hcl:2", bad, err, want)
		}
	}
}
