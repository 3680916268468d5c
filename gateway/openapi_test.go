package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/mediajobs/mediajobs/testenv"
)

// openapiDoc is the part of openapi.json the tests look at.
type openapiDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Info       map[string]any                        `json:"info"`
	Security   []map[string][]string                 `json:"security"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		SecuritySchemes map[string]any `json:"securitySchemes"`
	} `json:"components"`
}

type openapiOp struct {
	OperationID string                 `json:"operationId"`
	Summary     string                 `json:"summary"`
	Security    *[]map[string][]string `json:"security"`
	Responses   map[string]any         `json:"responses"`
}

var openapiMethods = map[string]bool{"GET": true, "POST": true, "PUT": true, "DELETE": true, "PATCH": true}

func loadOpenAPI(t *testing.T) openapiDoc {
	t.Helper()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) {
		t.Fatal("openapi.json is not valid JSON")
	}
	var doc openapiDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

// documentedOps returns "METHOD /path" -> operation for every operation in doc.
func documentedOps(t *testing.T, doc openapiDoc) map[string]openapiOp {
	t.Helper()
	ops := map[string]openapiOp{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			m := strings.ToUpper(method)
			if !openapiMethods[m] && m != "HEAD" && m != "OPTIONS" && m != "TRACE" {
				continue // "parameters", "summary", ...
			}
			var op openapiOp
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", m, path, err)
			}
			ops[m+" "+path] = op
		}
	}
	return ops
}

// openapiPath turns a fiber route path into its OpenAPI form.
func openapiPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, ":"):
			segs[i] = "{" + strings.TrimSuffix(strings.TrimPrefix(s, ":"), "?") + "}"
		case s == "*": // /files/* and /progress/*: the signed key
			segs[i] = "{key}"
		}
	}
	return strings.Join(segs, "/")
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Errorf("openapi = %q, want 3.0.x", doc.OpenAPI)
	}
	if doc.Info["title"] == nil || doc.Info["version"] == nil {
		t.Errorf("info lacks title or version: %v", doc.Info)
	}
	if len(doc.Paths) == 0 {
		t.Fatal("no paths")
	}
	if doc.Components.SecuritySchemes["bearerAuth"] == nil {
		t.Error("no bearerAuth security scheme")
	}
	ids := map[string]string{}
	for key, op := range documentedOps(t, doc) {
		if op.OperationID == "" || op.Summary == "" || len(op.Responses) == 0 {
			t.Errorf("%s: needs operationId, summary and responses", key)
		}
		if other, dup := ids[op.OperationID]; dup {
			t.Errorf("operationId %q used by %s and %s", op.OperationID, other, key)
		}
		ids[op.OperationID] = key

		// Security: a bearer key on every /api operation but the document itself
		// and its readable form.
		sec := doc.Security
		if op.Security != nil {
			sec = *op.Security
		}
		needsKey := false
		for _, req := range sec {
			if _, ok := req["bearerAuth"]; ok {
				needsKey = true
			}
		}
		path := strings.SplitN(key, " ", 2)[1]
		wantKey := strings.HasPrefix(path, "/api/") && path != "/api/openapi.json" && !strings.HasPrefix(path, "/api/docs")
		if needsKey != wantKey {
			t.Errorf("%s: bearerAuth required = %v, want %v", key, needsKey, wantKey)
		}
		if wantKey {
			for _, code := range []string{"200", "401", "429"} {
				if op.Responses[code] == nil {
					t.Errorf("%s: response %s not documented", key, code)
				}
			}
		}
	}
	// Every reference must resolve.
	raw, _ := os.ReadFile("openapi.json")
	var all map[string]any
	json.Unmarshal(raw, &all)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				if !openapiRefResolves(all, r) {
					t.Errorf("unresolved $ref %q", r)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(all)
}

func openapiRefResolves(doc map[string]any, ref string) bool {
	if !strings.HasPrefix(ref, "#/") {
		return false
	}
	var cur any = doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}

// TestOpenAPIMatchesRoutes checks that the document and the fiber app list the
// same operations: nothing undocumented, nothing documented that does not exist.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	h := newHarness(t)
	routes := map[string]bool{}
	for _, r := range h.app.GetRoutes(true) {
		if !openapiMethods[r.Method] || r.Path == "/api" {
			continue // HEAD twins of GET routes, middleware (GetRoutes(true) leaves out app.Use's)
		}
		routes[r.Method+" "+openapiPath(r.Path)] = true
	}
	if len(routes) == 0 {
		t.Fatal("the app has no routes")
	}
	ops := documentedOps(t, loadOpenAPI(t))
	var missing, extra []string
	for k := range routes {
		if _, ok := ops[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range ops {
		if !routes[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("routes not in openapi.json: %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("openapi.json operations the app does not serve: %v", extra)
	}
}

func TestOpenAPIServedWithoutKey(t *testing.T) {
	h := newHarness(t)
	resp, err := h.app.Test(httptest.NewRequest("GET", "/api/openapi.json", nil), 10000)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/openapi.json: HTTP %d %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q", ct)
	}
	want, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != string(want) {
		t.Errorf("served document (%d bytes) differs from openapi.json (%d bytes)", len(body), len(want))
	}
}

// The document is valid OpenAPI 3 by kin-openapi's validator (what generators such
// as oapi-codegen load), internal runner endpoints included.
func TestOpenAPIValidates(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapiJSON)
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json does not validate: %v", err)
	}
	// A nullable schema must say its type, or 3.0 tools ignore "nullable".
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["nullable"] == true && x["type"] == nil {
				t.Errorf("%s: nullable without a type", path)
			}
			for k, c := range x {
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range x {
				walk(fmt.Sprintf("%s/%d", path, i), c)
			}
		}
	}
	var raw any
	json.Unmarshal(openapiJSON, &raw)
	walk("#", raw)
}

// oapiCodegen is the generator the document is proven against (pinned: a newer one
// may read the document differently; bump both together).
const (
	oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"
	oapiRuntime = "github.com/oapi-codegen/runtime@v1.8.0"
)

// A Go client generated from the document by oapi-codegen compiles. It needs the
// Go module proxy (the generator and its runtime are fetched, then cached).
func TestOpenAPIGeneratesAGoClient(t *testing.T) {
	goBin := testenv.Binary(t, "go")
	dir := t.TempDir()
	spec := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(spec, openapiJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		return out
	}
	run("mod", "init", "example.com/apiclient")
	src := run("run", oapiCodegen, "-generate", "types,client", "-package", "apiclient", spec)
	if !strings.Contains(string(src), "func NewClientWithResponses(") {
		t.Fatalf("generated code has no client:\n%.2000s", src)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.gen.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	run("get", oapiRuntime)
	run("mod", "tidy")
	run("vet", "./...")
}

// /api/docs renders the document with the vendored Redoc: the page names only this
// gateway's script and document, and its policy allows nothing from elsewhere.
func TestAPIDocsPage(t *testing.T) {
	h := newHarness(t)
	resp, err := h.app.Test(httptest.NewRequest("GET", "/api/docs", nil), 10000)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.Contains(string(page), `spec-url="/api/openapi.json"`) ||
		!strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "http") || strings.Contains(string(page), "http") {
		t.Fatalf("GET /api/docs: %d, CSP %q\n%s", resp.StatusCode, csp, page)
	}
	resp, err = h.app.Test(httptest.NewRequest("GET", "/api/docs/redoc.standalone.js?v="+redocVersion, nil), 10000)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || len(js) < 100000 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("redoc bundle: %d, %d bytes, %s", resp.StatusCode, len(js), resp.Header.Get("Content-Type"))
	}
	if resp, _ := h.app.Test(httptest.NewRequest("GET", "/api/docs/other.js", nil), 10000); resp.StatusCode != 404 {
		t.Fatalf("other asset: %d", resp.StatusCode)
	}
}
