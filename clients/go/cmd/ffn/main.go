// Command ffn runs the paper's feed-forward network, y = relu(x · w1) · w2, on an einsummabled
// daemon through the Go client, as clients/python/examples/ffn.py does from Python.
//
// The number of tokens is symbolic: the graph is registered once, its weights uploaded once,
// and the server compiles a plan per token count. Each answer is checked against a float64
// reference computed here with plain loops, and the plan the server chose is printed. Exit
// status 0 when every answer matches, 1 on a mismatch, 2 on a server or usage error.
//
//	go run ./cmd/ffn -server 127.0.0.1:50051 -devices 4 -tokens 64,128
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	mathrand "math/rand"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/einsummable/einsummable/clients/go/einsummable"
	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
)

// rtol is the tolerance of the f32 answer against the float64 reference (maxError).
const rtol = 1e-4

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the command line.
type config struct {
	server, token, caFile string
	tls, noExplain        bool
	devices               int
	tokens                []int64
	dModel, dFF           int64
	schedule, planner     string
	seed                  int64
	timeout               time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	flags := flag.NewFlagSet("ffn", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&c.server, "server", "", "host:port (default $EINSUMMABLE_SERVER or "+einsummable.DefaultServer+")")
	flags.StringVar(&c.token, "token", os.Getenv("EINSUMMABLE_TOKEN"), "bearer token (default $EINSUMMABLE_TOKEN)")
	flags.BoolVar(&c.tls, "tls", false, "connect with TLS, verifying the server against the system's roots")
	flags.StringVar(&c.caFile, "ca", "", "connect with TLS, trusting the PEM certificates in this file (the daemon's --tls_cert)")
	flags.IntVar(&c.devices, "devices", 4, "devices to split every operator across (0: all)")
	tokens := flags.String("tokens", "64", "token counts to run, comma-separated, e.g. 64,128")
	flags.Int64Var(&c.dModel, "d-model", 128, "model dimension")
	flags.Int64Var(&c.dFF, "d-ff", 512, "hidden dimension")
	flags.StringVar(&c.schedule, "schedule", "optimized", "exchange programs: optimized, naive or ai")
	flags.StringVar(&c.planner, "planner", "", "planner: dp (default), greedy, random, or a baseline")
	flags.Int64Var(&c.seed, "seed", 0, "seed of the random inputs and weights")
	flags.BoolVar(&c.noExplain, "no-explain", false, "do not print the plan")
	flags.DurationVar(&c.timeout, "timeout", 5*time.Minute, "bound on every call")
	if err := flags.Parse(args); err != nil {
		return nil, err
	}
	if flags.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flags.Args())
	}
	for _, field := range strings.Split(*tokens, ",") {
		count, err := strconv.ParseInt(strings.TrimSpace(field), 10, 64)
		if err != nil || count <= 0 {
			return nil, fmt.Errorf("-tokens: %q is not a positive count", field)
		}
		c.tokens = append(c.tokens, count)
	}
	if c.dModel <= 0 || c.dFF <= 0 {
		return nil, fmt.Errorf("-d-model %d and -d-ff %d must be positive", c.dModel, c.dFF)
	}
	if c.devices < 0 || c.devices > math.MaxInt32 {
		return nil, fmt.Errorf("-devices %d is not a device count", c.devices)
	}
	return c, nil
}

// FFN is the paper's feed-forward network: x [tokens, d_model] (tokens symbolic), weights
// w1 [d_model, d_ff] and w2 [d_ff, d_model]; h = x·w1, a = relu(h), y = a·w2, y saved. At
// d_model 1024, d_ff 4096 it is proto/examples/ffn.textproto.
func FFN(dModel, dFF int64) (*pb.GraphDef, error) {
	g := einsummable.NewGraph()
	x := g.Input("x", pb.DType_F32, einsummable.Symbol("tokens"), einsummable.Fixed("d_model", dModel))
	w1 := g.Input("w1", pb.DType_F32, einsummable.Fixed("d_model", dModel), einsummable.Fixed("d_ff", dFF))
	w2 := g.Input("w2", pb.DType_F32, einsummable.Fixed("d_ff", dFF), einsummable.Fixed("d_model", dModel))
	h := g.MatMul("h", x, w1)
	a := g.Unary("a", "relu", h)
	g.Save(g.MatMul("y", a, w2))
	return g.GraphDef()
}

// reference is relu(x·w1)·w2 in float64 with plain loops; x is [tokens, dModel], w1
// [dModel, dFF], w2 [dFF, dModel], all row-major.
func reference(x, w1, w2 []float32, tokens, dModel, dFF int64) []float64 {
	y := make([]float64, tokens*dModel)
	hidden := make([]float64, dFF)
	for t := int64(0); t < tokens; t++ {
		for f := range hidden {
			hidden[f] = 0
		}
		for m := int64(0); m < dModel; m++ {
			xv := float64(x[t*dModel+m])
			row := w1[m*dFF : (m+1)*dFF]
			for f, wv := range row {
				hidden[f] += xv * float64(wv)
			}
		}
		out := y[t*dModel : (t+1)*dModel]
		for f, hv := range hidden {
			if hv <= 0 {
				continue // relu
			}
			row := w2[int64(f)*dModel : int64(f+1)*dModel]
			for m, wv := range row {
				out[m] += hv * float64(wv)
			}
		}
	}
	return y
}

// maxError is the largest |actual - expected| relative to rtol·(|expected| + max|expected|):
// at most 1 passes. The second term lets elements near zero, whose last bits depend on the
// order of summation, pass at the absolute error of the largest ones (as ffn.py checks).
func maxError(actual []float32, expected []float64) float64 {
	largest := 0.0
	for _, e := range expected {
		largest = math.Max(largest, math.Abs(e))
	}
	worst := 0.0
	for i, e := range expected {
		err := math.Abs(float64(actual[i])-e) / (rtol * (math.Abs(e) + largest))
		if math.IsNaN(err) || math.IsInf(err, 0) {
			return math.Inf(1)
		}
		worst = math.Max(worst, err)
	}
	return worst
}

// normal is count values drawn from N(0, scale²).
func normal(rng *mathrand.Rand, count int64, scale float64) []float32 {
	values := make([]float32, count)
	for i := range values {
		values[i] = float32(rng.NormFloat64() * scale)
	}
	return values
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "ffn: %v\n", err)
		return 2
	}
	ok, err := check(c, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "ffn: %v\n", err)
		return 2
	}
	if !ok {
		return 1
	}
	return 0
}

// check registers the FFN, uploads its weights, runs it at every token count and compares the
// answers; false on a mismatch.
func check(c *config, out io.Writer) (bool, error) {
	opts := []einsummable.Option{einsummable.WithToken(c.token), einsummable.WithTimeout(c.timeout)}
	if c.caFile != "" {
		opts = append(opts, einsummable.WithRootCertificatesFile(c.caFile))
	} else if c.tls {
		opts = append(opts, einsummable.WithTLS())
	}
	client, err := einsummable.Dial(c.server, opts...)
	if err != nil {
		return false, err
	}
	defer client.Close()
	ctx := context.Background()

	info, err := client.ServerInfo(ctx)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "einsummabled %s at %s: %s backend, %d devices, topology %s\n",
		info.GetVersion(), client.Server(), info.GetBackend(), info.GetDevices(), info.GetTopology())

	graph, err := FFN(c.dModel, c.dFF)
	if err != nil {
		return false, err
	}
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		return false, err
	}
	// A name of its own, so runs side by side never collide.
	model := "ffn-go-" + hex.EncodeToString(suffix)
	if _, err := client.RegisterModel(ctx, model, graph, []string{"w1", "w2"}, nil); err != nil {
		return false, err
	}
	defer func() {
		if err := client.UnregisterModel(context.Background(), model); err != nil {
			fmt.Fprintf(out, "ffn: %v\n", err)
		}
	}()

	rng := mathrand.New(mathrand.NewSource(c.seed))
	w1 := normal(rng, c.dModel*c.dFF, 1/math.Sqrt(float64(c.dModel)))
	w2 := normal(rng, c.dFF*c.dModel, 1/math.Sqrt(float64(c.dFF)))
	for _, weight := range []struct {
		name   string
		shape  []int64
		values []float32
	}{{"w1", []int64{c.dModel, c.dFF}, w1}, {"w2", []int64{c.dFF, c.dModel}, w2}} {
		tensor, err := einsummable.NewTensorF32(weight.shape, weight.values)
		if err != nil {
			return false, err
		}
		if _, err := client.UploadTensor(ctx, model, weight.name, tensor); err != nil {
			return false, err
		}
	}

	options := &einsummable.CompileOptions{Devices: int32(c.devices), Schedule: c.schedule, Planner: c.planner}
	allOK := true
	for _, tokens := range c.tokens {
		dims := map[string]int64{"tokens": tokens}
		compiled, err := client.Compile(ctx, model, dims, options)
		if err != nil {
			return false, err
		}
		xValues := normal(rng, tokens*c.dModel, 1)
		x, err := einsummable.NewTensorF32([]int64{tokens, c.dModel}, xValues)
		if err != nil {
			return false, err
		}
		result, err := client.Execute(ctx, model, map[string]*pb.Tensor{"x": x}, dims, options)
		if err != nil {
			return false, err
		}
		y, err := result.Float32s("y")
		if err != nil {
			return false, err
		}
		shape := result.Outputs["y"].GetShape()
		errorRatio := math.Inf(1)
		if len(shape) == 2 && shape[0] == tokens && shape[1] == c.dModel && int64(len(y)) == tokens*c.dModel {
			errorRatio = maxError(y, reference(xValues, w1, w2, tokens, c.dModel, c.dFF))
		}
		passed := errorRatio <= 1 && result.Outputs["y"].GetDtype() == pb.DType_F32
		allOK = allOK && passed
		verdict := "ok"
		if !passed {
			verdict = fmt.Sprintf("MISMATCH (shape %v, dtype %s)", shape, einsummable.DTypeName(result.Outputs["y"].GetDtype()))
		}
		fmt.Fprintf(out, "ffn tokens=%d devices=%d: %s (error %.3g of the tolerance, rtol %g; strategy %q, compiled in %.3f s, executed in %.4f s)\n",
			tokens, c.devices, verdict, errorRatio, rtol, compiled.GetStrategy(), compiled.GetCompileSeconds(), result.ExecuteSeconds)
		if !c.noExplain {
			plan, err := client.Explain(ctx, model, dims, options)
			if err != nil {
				return false, err
			}
			fmt.Fprintln(out, plan.GetText())
		}
	}
	return allOK, nil
}
