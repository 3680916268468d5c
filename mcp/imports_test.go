package mcp

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The package is a client of the service: neither it nor what it imports from
// this module pulls in a server package, so it builds and is tested apart from
// them; the gateway's client limits come in through Clients.
func TestImportsNoServerPackage(t *testing.T) {
	const module = "github.com/mediajobs/mediajobs"
	seen := map[string]bool{}
	var walk func(pkg string)
	walk = func(pkg string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		dir := filepath.Join("..", filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")))
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		if len(files) == 0 {
			t.Fatalf("no Go files for %s in %s", pkg, dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if p == module || strings.HasPrefix(p, module+"/") {
					walk(p)
				}
			}
		}
	}
	walk(module + "/mcp")
	if !seen[module+"/client"] {
		t.Fatalf("the walk missed client: %v", seen)
	}
	for _, server := range []string{"gateway", "dispatcher", "store", "runner"} {
		if seen[module+"/"+server] {
			t.Errorf("mcp imports %s, directly or through this module's packages", server)
		}
	}
}
