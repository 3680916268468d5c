package mediajobs

import "testing"

// Every name layout.go builds parses back, and what it did not build does not.
func TestLayoutNamesRoundTrip(t *testing.T) {
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	if a, i, ok := ParseTmpKey(TmpKey("acct", id)); !ok || a != "acct" || i != id {
		t.Fatalf("ParseTmpKey(TmpKey) = %q %q %v", a, i, ok)
	}
	for _, bad := range []string{"tmp/acct/not-a-uuid", "tmp//" + id, "jobs/acct/" + id, "tmp/acct/" + id + "/x", "tmp/acct/0f8fad5b-d9cb-469f-a165-70867728950g"} {
		if _, _, ok := ParseTmpKey(bad); ok {
			t.Errorf("ParseTmpKey(%q) ok", bad)
		}
	}
	if got := RunScope(id, 2); got != "jobs/"+id+"/2/" {
		t.Fatalf("RunScope = %q", got)
	}
	child := PoolJobID("cpu") + "/dispatch-" + ChildPrefix(id, 3) + "-1732780800-abcd1234"
	if j, n, ok := ParseChildID(child); !ok || j != id || n != 3 {
		t.Fatalf("ParseChildID(%q) = %q %d %v", child, j, n, ok)
	}
	for _, bad := range []string{PoolJobID("cpu"), WarmJobID("cpu"), WarmChild("r1"), PoolJobID("cpu") + "/dispatch-" + id + "-x1"} {
		if _, _, ok := ParseChildID(bad); ok {
			t.Errorf("ParseChildID(%q) ok", bad)
		}
	}
	if run, ok := WarmRunOfChild(WarmChild("r1")); !ok || run != "r1" {
		t.Fatalf("WarmRunOfChild(WarmChild) = %q %v", run, ok)
	}
	if _, ok := WarmRunOfChild(child); ok {
		t.Fatal("a Nomad child read as a warm run")
	}
}
