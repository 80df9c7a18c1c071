package einsummablepb_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
)

// The committed stubs are exactly what generate.sh writes now, so they cannot go stale: change
// a .proto file without running generate.sh and this fails. Skipped where protoc or its Go
// plugins are missing (a user who fetched the module needs none of them).
func TestGeneratedCodeIsFresh(t *testing.T) {
	for _, tool := range []string{"protoc", "protoc-gen-go", "protoc-gen-go-grpc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found on PATH, so the stubs cannot be regenerated to compare", tool)
		}
	}
	out := t.TempDir()
	command := exec.Command(filepath.Join("..", "generate.sh"), out)
	if output, err := command.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, output)
	}
	fresh := generated(t, filepath.Join(out, "einsummablepb"))
	committed := generated(t, ".")
	if len(fresh) == 0 || !equalKeys(fresh, committed) {
		t.Fatalf("generate.sh writes %v; committed are %v: run clients/go/generate.sh and commit einsummablepb/",
			keys(fresh), keys(committed))
	}
	for name, data := range fresh {
		if !bytes.Equal(data, committed[name]) {
			t.Errorf("einsummablepb/%s differs from what generate.sh writes now: run clients/go/generate.sh "+
				"and commit it (never edit it by hand)", name)
		}
	}
}

// generated is the .pb.go files of dir by name.
func generated(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(path)] = data
	}
	return files
}

func keys(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func equalKeys(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for name := range a {
		if _, ok := b[name]; !ok {
			return false
		}
	}
	return true
}
