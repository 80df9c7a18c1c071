package einsummable_test

// Integration: the client against a real einsummabled (internal/daemontest: the binary of
// $EINSUMMABLE_DAEMON, default build/bin/einsummabled, on a free loopback port; skipped,
// saying so, when it is absent).

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/einsummable/einsummable/clients/go/einsummable"
	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
	"github.com/einsummable/einsummable/clients/go/internal/daemontest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The FFN's sizes here: small, so the reference and the daemon's compiles are quick.
const (
	dModel = 16
	dFF    = 32
)

func dial(t *testing.T, address string, opts ...einsummable.Option) *einsummable.Client {
	t.Helper()
	client, err := einsummable.Dial(address, append([]einsummable.Option{einsummable.WithTimeout(60 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func random(rng *rand.Rand, count int) []float32 {
	values := make([]float32, count)
	for i := range values {
		values[i] = float32(rng.NormFloat64())
	}
	return values
}

func tensor(t *testing.T, shape []int64, values []float32) *pb.Tensor {
	t.Helper()
	result, err := einsummable.NewTensorF32(shape, values)
	if err != nil {
		t.Fatal(err)
	}
	return result
}

// reference is relu(x·w1)·w2 in float64.
func reference(x, w1, w2 []float32, tokens int) []float64 {
	y := make([]float64, tokens*dModel)
	for i := 0; i < tokens; i++ {
		for f := 0; f < dFF; f++ {
			h := 0.0
			for m := 0; m < dModel; m++ {
				h += float64(x[i*dModel+m]) * float64(w1[m*dFF+f])
			}
			if h > 0 {
				for m := 0; m < dModel; m++ {
					y[i*dModel+m] += h * float64(w2[f*dModel+m])
				}
			}
		}
	}
	return y
}

func checkClose(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// ffnModel registers the FFN as model and uploads its weights; it returns them.
func ffnModel(t *testing.T, ctx context.Context, client *einsummable.Client, model string) (w1, w2 []float32) {
	t.Helper()
	graph, err := ffn(dModel, dFF).GraphDef()
	if err != nil {
		t.Fatal(err)
	}
	registered, err := client.RegisterModel(ctx, model, graph, []string{"w1", "w2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(registered.Symbols, ",") != "tokens" || strings.Join(registered.Inputs, ",") != "x" {
		t.Fatalf("registered: symbols %v inputs %v", registered.Symbols, registered.Inputs)
	}
	rng := rand.New(rand.NewSource(1))
	w1, w2 = random(rng, dModel*dFF), random(rng, dFF*dModel)
	for name, weight := range map[string]*pb.Tensor{
		"w1": tensor(t, []int64{dModel, dFF}, w1),
		"w2": tensor(t, []int64{dFF, dModel}, w2),
	} {
		stored, err := client.UploadTensor(ctx, model, name, weight)
		if err != nil {
			t.Fatal(err)
		}
		if stored != int64(len(weight.Data)) {
			t.Fatalf("upload %s: the server stored %d bytes of %d", name, stored, len(weight.Data))
		}
	}
	return w1, w2
}

// The FFN end to end: register, upload in chunks, compile (miss then hit), execute at two
// token counts against the reference, explain, list, unregister; info and health around it.
func TestFFNOnTheDaemon(t *testing.T) {
	d := daemontest.Start(t, daemontest.Config{})
	// 100-byte chunks: each weight (2 KiB) goes up in 21 of them.
	client := dial(t, d.Address, einsummable.WithChunkBytes(100))
	ctx := context.Background()

	info, err := client.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The CPU backend names its gemm library and kernel family (docs/runtime.md).
	if info.Devices != daemontest.Devices || info.Version == "" || !strings.Contains(info.Kernels, " kernels") {
		t.Fatalf("server info: %v", info)
	}
	serving, err := client.Health(ctx, "")
	if err != nil || serving != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", serving, err)
	}

	w1, w2 := ffnModel(t, ctx, client, "ffn")
	models, err := client.ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(models) != 1 || models[0].Model != "ffn" {
		t.Fatalf("models: %v", models)
	}
	loaded := append([]string(nil), models[0].WeightsLoaded...)
	sort.Strings(loaded)
	if strings.Join(loaded, ",") != "w1,w2" || strings.Join(models[0].Saved, ",") != "y" {
		t.Fatalf("model: %v", models[0])
	}

	options := &einsummable.CompileOptions{Devices: 4}
	first, err := client.Compile(ctx, "ffn", map[string]int64{"tokens": 5}, options)
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.Compile(ctx, "ffn", map[string]int64{"tokens": 5}, options)
	if err != nil {
		t.Fatal(err)
	}
	if first.CacheHit || !again.CacheHit || first.PlanKey != again.PlanKey || first.Strategy == "" {
		t.Fatalf("compiles: %v then %v", first, again)
	}

	rng := rand.New(rand.NewSource(2))
	for _, tokens := range []int{5, 9} {
		x := random(rng, tokens*dModel)
		dims := map[string]int64{"tokens": int64(tokens)}
		result, err := client.Execute(ctx, "ffn", map[string]*pb.Tensor{"x": tensor(t, []int64{int64(tokens), dModel}, x)}, dims, options, "y")
		if err != nil {
			t.Fatal(err)
		}
		if shape := result.Outputs["y"].GetShape(); len(shape) != 2 || shape[0] != int64(tokens) || shape[1] != dModel {
			t.Fatalf("tokens=%d: y has shape %v", tokens, shape)
		}
		y, err := result.Float32s("y")
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "y", y, reference(x, w1, w2, tokens))
		if tokens == 5 && !result.CacheHit {
			t.Errorf("tokens=5 executed without the plan Compile made")
		}
		if _, err := result.Float32s("z"); err == nil || !strings.Contains(err.Error(), "no output 'z' in the answer (outputs: y)") {
			t.Errorf("missing output: %v", err)
		}
	}

	plan, err := client.Explain(ctx, "ffn", map[string]int64{"tokens": 9}, options)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.Text, "logical plan") || plan.PredictedCostBytes <= 0 {
		t.Fatalf("explain: %v", plan)
	}

	if err := client.UnregisterModel(ctx, "ffn"); err != nil {
		t.Fatal(err)
	}
	if models, err := client.ListModels(ctx); err != nil || len(models) != 0 {
		t.Fatalf("after unregistering: %v, %v", models, err)
	}
}

// wantError checks err is an *Error of code whose message holds every one of parts.
func wantError(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %s", what, einsummable.CodeName(code))
		return
	}
	var e *einsummable.Error
	if !errors.As(err, &e) {
		t.Errorf("%s: %v (%T) is not an *einsummable.Error", what, err, err)
		return
	}
	if status.Code(err) != code || e.Code() != code {
		t.Errorf("%s: code %s, want %s (%v)", what, einsummable.CodeName(status.Code(err)), einsummable.CodeName(code), err)
	}
	for _, part := range parts {
		if !strings.Contains(e.Message(), part) {
			t.Errorf("%s: message %q does not name %q", what, e.Message(), part)
		}
	}
}

// Bad requests come back as *Error with the server's code and a message naming the culprit;
// each is followed by a good request, which still works.
func TestBadRequestsNameTheCulprit(t *testing.T) {
	d := daemontest.Start(t, daemontest.Config{})
	client := dial(t, d.Address, einsummable.WithChunkBytes(1024))
	ctx := context.Background()

	graph, err := ffn(dModel, dFF).GraphDef()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.RegisterModel(ctx, "early", graph, []string{"w1", "w2"}, nil); err != nil {
		t.Fatal(err)
	}
	x := tensor(t, []int64{3, dModel}, make([]float32, 3*dModel))
	_, err = client.Execute(ctx, "early", map[string]*pb.Tensor{"x": x}, map[string]int64{"tokens": 3}, nil)
	wantError(t, "execute before the weights", err, codes.FailedPrecondition, "w1")

	w1, w2 := ffnModel(t, ctx, client, "ffn")
	good := func(what string) {
		t.Helper()
		values := random(rand.New(rand.NewSource(3)), 3*dModel)
		result, err := client.Execute(ctx, "ffn", map[string]*pb.Tensor{"x": tensor(t, []int64{3, dModel}, values)}, map[string]int64{"tokens": 3}, nil)
		if err != nil {
			t.Fatalf("good request after %s: %v", what, err)
		}
		y, err := result.Float32s("y")
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "y after "+what, y, reference(values, w1, w2, 3))
	}

	wrong := tensor(t, []int64{3, dModel + 1}, make([]float32, 3*(dModel+1)))
	_, err = client.Execute(ctx, "ffn", map[string]*pb.Tensor{"x": wrong}, map[string]int64{"tokens": 3}, nil)
	wantError(t, "input of the wrong shape", err, codes.InvalidArgument, "'x'", "d_model", "17")
	good("the wrong shape")

	_, err = client.Execute(ctx, "no-such-model", map[string]*pb.Tensor{"x": x}, map[string]int64{"tokens": 3}, nil)
	wantError(t, "unknown model", err, codes.NotFound, "no-such-model")
	good("the unknown model")

	_, err = client.Execute(ctx, "ffn", map[string]*pb.Tensor{"x": x}, map[string]int64{"tokens": 4}, nil)
	wantError(t, "dims disagreeing with the input", err, codes.InvalidArgument, "'x'", "tokens")
	good("the disagreeing dims")

	_, err = client.RegisterModel(ctx, "ffn", graph, []string{"w1", "w2"}, nil)
	wantError(t, "registered twice", err, codes.AlreadyExists, "ffn")
	good("registering twice")

	// A weight of the wrong shape, 40 KiB in 1 KiB chunks: refused at the first chunk, so
	// later Sends see io.EOF and the status comes from CloseAndRecv.
	big := tensor(t, []int64{dModel * 20, dFF}, make([]float32, dModel*20*dFF))
	_, err = client.UploadTensor(ctx, "ffn", "w1", big)
	wantError(t, "weight of the wrong shape", err, codes.InvalidArgument, "w1")
	_, err = client.UploadTensor(ctx, "no-such-model", "w1", big)
	wantError(t, "upload to an unknown model", err, codes.NotFound, "no-such-model")
	good("the refused uploads (the old weights serve)")

	_, err = client.Compile(ctx, "ffn", map[string]int64{"tokens": 3}, &einsummable.CompileOptions{Devices: 99})
	wantError(t, "more devices than the server has", err, codes.InvalidArgument, "99")
	good("too many devices")

	_, err = client.Explain(ctx, "ffn", map[string]int64{}, nil)
	wantError(t, "a symbol left unbound", err, codes.InvalidArgument, "tokens")

	var e *einsummable.Error
	errors.As(err, &e)
	if e.Method != "Explain" || !strings.HasPrefix(err.Error(), "Explain: ") || !strings.HasSuffix(err.Error(), "(INVALID_ARGUMENT)") {
		t.Errorf("error text %q", err.Error())
	}
}

// A daemon started with --token_file refuses calls without the token (or with another) as
// UNAUTHENTICATED, and serves the client that has it.
func TestBearerToken(t *testing.T) {
	tokenFile := daemontest.WriteFile(t, "token", []byte("  go-s3cret\n")) // white space ignored
	d := daemontest.Start(t, daemontest.Config{Flags: []string{"--token_file=" + tokenFile}, Token: "go-s3cret"})
	ctx := context.Background()
	t.Setenv("EINSUMMABLE_TOKEN", "")

	for _, token := range []string{"", "wrong", "go-s3cre", "go-s3cret2"} {
		_, err := dial(t, d.Address, einsummable.WithToken(token)).ListModels(ctx)
		wantError(t, "token "+token, err, codes.Unauthenticated)
	}
	// WaitReady gives up at once on a refusal that waiting does not cure.
	start := time.Now()
	err := dial(t, d.Address).WaitReady(ctx)
	wantError(t, "WaitReady without the token", err, codes.Unauthenticated)
	if time.Since(start) > 5*time.Second {
		t.Errorf("WaitReady took %v to report UNAUTHENTICATED", time.Since(start))
	}

	client := dial(t, d.Address, einsummable.WithToken("go-s3cret"))
	ffnModel(t, ctx, client, "ffn")
	if models, err := client.ListModels(ctx); err != nil || len(models) != 1 {
		t.Fatalf("with the token: %v, %v", models, err)
	}
	// $EINSUMMABLE_TOKEN is the default token.
	t.Setenv("EINSUMMABLE_TOKEN", "go-s3cret")
	if _, err := dial(t, d.Address).ListModels(ctx); err != nil {
		t.Fatalf("with $EINSUMMABLE_TOKEN: %v", err)
	}
}

// TLS (--tls_cert, --tls_key): a client trusting the daemon's certificate works; plaintext and
// a client trusting another certificate get no connection (UNAVAILABLE).
func TestTLS(t *testing.T) {
	cert, key := daemontest.SelfSigned(t)
	other, _ := daemontest.SelfSigned(t)
	certFile := daemontest.WriteFile(t, "server.crt", cert)
	keyFile := daemontest.WriteFile(t, "server.key", key)
	tokenFile := daemontest.WriteFile(t, "token", []byte("tls-s3cret"))
	d := daemontest.Start(t, daemontest.Config{
		Flags:    []string{"--tls_cert=" + certFile, "--tls_key=" + keyFile, "--token_file=" + tokenFile},
		Token:    "tls-s3cret",
		RootsPEM: cert,
	})
	ctx := context.Background()

	client := dial(t, d.Address, einsummable.WithRootCertificatesFile(certFile), einsummable.WithToken("tls-s3cret"))
	w1, w2 := ffnModel(t, ctx, client, "ffn")
	values := random(rand.New(rand.NewSource(4)), 2*dModel)
	result, err := client.Execute(ctx, "ffn", map[string]*pb.Tensor{"x": tensor(t, []int64{2, dModel}, values)}, map[string]int64{"tokens": 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	y, err := result.Float32s("y")
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y over TLS", y, reference(values, w1, w2, 2))

	short := []einsummable.Option{einsummable.WithTimeout(10 * time.Second), einsummable.WithToken("tls-s3cret")}
	_, err = dial(t, d.Address, short...).ListModels(ctx)
	wantError(t, "plaintext to a TLS port", err, codes.Unavailable)
	_, err = dial(t, d.Address, append(short, einsummable.WithRootCertificates(other))...).ListModels(ctx)
	wantError(t, "trusting another certificate", err, codes.Unavailable)
	_, err = dial(t, d.Address, einsummable.WithRootCertificates(cert), einsummable.WithToken("")).ListModels(ctx)
	wantError(t, "TLS without the token", err, codes.Unauthenticated)
}

// WaitReady on an address nobody serves gives up at its context's deadline, saying where it
// looked.
func TestWaitReadyGivesUp(t *testing.T) {
	client := dial(t, "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := client.WaitReady(ctx)
	wantError(t, "nobody listening", err, codes.Unavailable, "no answer from 127.0.0.1:1")
}

// The daemon on a Unix socket (--listen=unix:PATH, after the harness's loopback default, so it
// wins): Dial takes the address as the daemon prints it.
func TestUnixSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "einsummabled.sock")
	d := daemontest.Start(t, daemontest.Config{Flags: []string{"--listen=unix:" + socket}})
	if d.Address != "unix:"+socket {
		t.Fatalf("the daemon listens on %s, not unix:%s", d.Address, socket)
	}
	client := dial(t, d.Address)
	w1, w2 := ffnModel(t, context.Background(), client, "ffn")
	values := random(rand.New(rand.NewSource(5)), dModel)
	result, err := client.Execute(context.Background(), "ffn", map[string]*pb.Tensor{"x": tensor(t, []int64{1, dModel}, values)}, map[string]int64{"tokens": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	y, err := result.Float32s("y")
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "y over a Unix socket", y, reference(values, w1, w2, 1))
}

// Token buckets (docs/server.md "Token buckets"): the FFN registered with batching and buckets
// of 8 and 16 tokens answers 5 and 11 tokens, padded to 8 and 16 and cut back, as the
// reference does; ListModels shows the buckets and their plans compiled in the background; the
// inputs' shapes bind tokens (no dims).
func TestTokenBucketsOnTheDaemon(t *testing.T) {
	d := daemontest.Start(t, daemontest.Config{})
	client := dial(t, d.Address)
	ctx := context.Background()
	graph, err := ffn(dModel, dFF).GraphDef()
	if err != nil {
		t.Fatal(err)
	}
	batching := &pb.Batching{Dimension: "tokens", Buckets: &pb.TokenBuckets{Sizes: []int64{8, 16}}}
	if _, err := client.RegisterModel(ctx, "ffn", graph, []string{"w1", "w2"}, batching); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(3))
	w1, w2 := random(rng, dModel*dFF), random(rng, dFF*dModel)
	for name, weight := range map[string]*pb.Tensor{
		"w1": tensor(t, []int64{dModel, dFF}, w1),
		"w2": tensor(t, []int64{dFF, dModel}, w2),
	} {
		if _, err := client.UploadTensor(ctx, "ffn", name, weight); err != nil {
			t.Fatal(err)
		}
	}
	models, err := client.ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := models[0].GetBatching().GetBuckets().GetSizes(); len(got) != 2 || got[0] != 8 || got[1] != 16 {
		t.Fatalf("buckets listed: %v", got)
	}
	// Both buckets' plans compile in the background after registration.
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	warmUp, err := client.WaitForWarmUp(waitCtx, "ffn", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if ready := warmUp.GetReady(); warmUp.GetState() != pb.WarmUp_WARM_UP_DONE || len(ready) != 2 || ready[0] != 8 || ready[1] != 16 {
		t.Fatalf("warm-up: %v", warmUp)
	}
	options := &einsummable.CompileOptions{Devices: 2}
	for _, tokens := range []int{5, 11} {
		x := random(rng, tokens*dModel)
		result, err := client.Execute(ctx, "ffn", map[string]*pb.Tensor{"x": tensor(t, []int64{int64(tokens), dModel}, x)}, nil, options, "y")
		if err != nil {
			t.Fatal(err)
		}
		if shape := result.Outputs["y"].GetShape(); len(shape) != 2 || shape[0] != int64(tokens) {
			t.Fatalf("tokens=%d: y has shape %v", tokens, shape)
		}
		y, err := result.Float32s("y")
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, "y", y, reference(x, w1, w2, tokens))
	}
}
