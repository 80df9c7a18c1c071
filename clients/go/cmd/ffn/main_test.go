package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/einsummable/einsummable/clients/go/internal/daemontest"
)

func TestReferenceIsReluOfProducts(t *testing.T) {
	// x [1, 2], w1 [2, 2], w2 [2, 2]: h = [1·1 + 2·1, 1·(-1) + 2·0] = [3, -1], relu = [3, 0],
	// y = [3·1 + 0·5, 3·2 + 0·6] = [3, 6].
	y := reference([]float32{1, 2}, []float32{1, -1, 1, 0}, []float32{1, 2, 5, 6}, 1, 2, 2)
	if len(y) != 2 || y[0] != 3 || y[1] != 6 {
		t.Fatalf("reference = %v, want [3 6]", y)
	}
}

func TestMaxErrorScalesWithTheLargestElement(t *testing.T) {
	expected := []float64{100, 0.001}
	if e := maxError([]float32{100, 0.001}, expected); e > 1e-3 { // float32(0.001) is not 0.001
		t.Errorf("as close as float32 gets: %v", e)
	}
	// Off by 0.005 at the small element: within rtol·(0.001 + 100) ≈ 0.01.
	if e := maxError([]float32{100, 0.006}, expected); e > 1 {
		t.Errorf("small absolute error near zero failed: %v", e)
	}
	if e := maxError([]float32{100.1, 0.001}, expected); e <= 1 {
		t.Errorf("an error of 1e-3 relative passed: %v", e)
	}
	if e := maxError([]float32{float32(math.NaN()), 0}, expected); !math.IsInf(e, 1) {
		t.Errorf("NaN passed: %v", e)
	}
}

func TestFlagsAreChecked(t *testing.T) {
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-tokens", "8,x"}, {"-tokens", "0"}, {"-d-model", "0"}, {"extra"}} {
		stderr.Reset()
		if code := run(args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "ffn: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}

// The example end to end on a real daemon with a bearer token: two token counts checked, the
// plan printed, exit status 0.
func TestFFNExampleOnTheDaemon(t *testing.T) {
	tokenFile := daemontest.WriteFile(t, "token", []byte("ffn-token"))
	d := daemontest.Start(t, daemontest.Config{Flags: []string{"--token_file=" + tokenFile}, Token: "ffn-token"})
	var stdout, stderr bytes.Buffer
	code := run([]string{"-server", d.Address, "-token", "ffn-token", "-tokens", "8,24", "-d-model", "32", "-d-ff", "64"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"ffn tokens=8 devices=4: ok", "ffn tokens=24 devices=4: ok", "logical plan"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// Without the token: a server error, exit status 2, naming the code.
	stdout.Reset()
	stderr.Reset()
	t.Setenv("EINSUMMABLE_TOKEN", "")
	if code := run([]string{"-server", d.Address, "-token", ""}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "UNAUTHENTICATED") {
		t.Errorf("without the token: exit %d, stderr %q", code, stderr.String())
	}
}
