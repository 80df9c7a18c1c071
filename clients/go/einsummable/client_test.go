package einsummable

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestResolveServer(t *testing.T) {
	t.Setenv("EINSUMMABLE_SERVER", "")
	if got := ResolveServer(""); got != DefaultServer {
		t.Errorf("default: %s", got)
	}
	t.Setenv("EINSUMMABLE_SERVER", "10.0.0.1:7000")
	if got := ResolveServer(""); got != "10.0.0.1:7000" {
		t.Errorf("from the environment: %s", got)
	}
	if got := ResolveServer("h:1"); got != "h:1" {
		t.Errorf("given: %s", got)
	}
}

// The token is WithToken's, else $EINSUMMABLE_TOKEN; WithToken("") sends none, as the Python
// client's token="" does.
func TestTokenResolution(t *testing.T) {
	resolve := func(opts ...Option) string {
		s := settings{}
		for _, opt := range opts {
			opt(&s)
		}
		return s.resolvedToken()
	}
	t.Setenv("EINSUMMABLE_TOKEN", "from-env")
	if got := resolve(); got != "from-env" {
		t.Errorf("no option: %q", got)
	}
	if got := resolve(WithToken("given")); got != "given" {
		t.Errorf("WithToken: %q", got)
	}
	if got := resolve(WithToken("")); got != "" {
		t.Errorf(`WithToken(""): %q`, got)
	}
	metadata, err := bearerToken("s3cret").GetRequestMetadata(context.Background())
	if err != nil || metadata["authorization"] != "Bearer s3cret" {
		t.Errorf("metadata %v, %v", metadata, err)
	}
}

func TestDialRefusesBadOptionsNamingThem(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		option Option
		want   string
	}{
		{WithChunkBytes(0), "chunk bytes must be positive, got 0"},
		{WithTimeout(-time.Second), "timeout must not be negative"},
		{WithRootCertificatesFile(filepath.Join(dir, "missing.pem")), "missing.pem"},
		{WithRootCertificatesFile(notPEM), "no PEM certificate in " + notPEM},
		{WithRootCertificates([]byte("junk")), "no PEM certificate in the root certificates given"},
	} {
		client, err := Dial("127.0.0.1:1", c.option)
		if err == nil {
			client.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
	client, err := Dial("127.0.0.1:1", WithToken("t"), WithTimeout(time.Second), WithChunkBytes(16))
	if err != nil {
		t.Fatalf("good options: %v", err)
	}
	client.Close()
}

func TestCompileOptionsValidate(t *testing.T) {
	var none *CompileOptions
	if err := none.Validate(); err != nil {
		t.Errorf("nil options: %v", err)
	}
	good := &CompileOptions{Devices: 4, Planner: "megatron", Schedule: "naive", Objective: "time", Seed: 3}
	if err := good.Validate(); err != nil {
		t.Errorf("good options: %v", err)
	}
	message := good.message()
	if message.Devices != 4 || message.Planner != "megatron" || message.Schedule != "naive" ||
		message.Objective != "time" || message.Seed != 3 {
		t.Errorf("message %v", message)
	}
	for _, c := range []struct {
		options CompileOptions
		want    string
	}{
		{CompileOptions{Devices: -1}, "devices must be a non-negative count, got -1"},
		{CompileOptions{Planner: "best"}, "planner 'best': expected one of dp, greedy, random"},
		{CompileOptions{Schedule: "fast"}, "schedule 'fast': expected one of optimized, naive, ai"},
		{CompileOptions{Objective: "fastest"}, "objective 'fastest': expected one of bytes, time, search, cost"},
	} {
		if err := c.options.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.options, err, c.want)
		}
	}
}

// Bad options fail before any call is made, naming the model.
func TestCallsRefuseBadOptionsBeforeCalling(t *testing.T) {
	client, err := Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, err = client.Compile(context.Background(), "m", nil, &CompileOptions{Planner: "nope"})
	if err == nil || !strings.Contains(err.Error(), "compile model 'm': planner 'nope'") {
		t.Errorf("compile: %v", err)
	}
	var asError *Error
	if errors.As(err, &asError) {
		t.Errorf("a client-side mistake came back as a server *Error: %v", err)
	}
}

func TestErrorCarriesTheStatus(t *testing.T) {
	original := status.Error(codes.InvalidArgument, "input 'x' dimension 1 ('d_model') is 16; got 17")
	err := rpcError("Execute", original)
	if got := err.Error(); got != "Execute: input 'x' dimension 1 ('d_model') is 16; got 17 (INVALID_ARGUMENT)" {
		t.Errorf("message %q", got)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("status.Code %v", status.Code(err))
	}
	s, ok := status.FromError(err)
	if !ok || s.Message() != "input 'x' dimension 1 ('d_model') is 16; got 17" {
		t.Errorf("status.FromError %v %v", s, ok)
	}
	var e *Error
	if !errors.As(err, &e) || e.Method != "Execute" || e.Code() != codes.InvalidArgument {
		t.Errorf("errors.As %v", e)
	}
	if !errors.Is(err, original) {
		t.Errorf("the gRPC error is not wrapped")
	}
	if rpcError("Execute", nil) != nil {
		t.Errorf("nil error wrapped")
	}
	if again := rpcError("Other", err); again != err {
		t.Errorf("an *Error was wrapped twice: %v", again)
	}
	if code := status.Code(rpcError("Execute", context.DeadlineExceeded)); code != codes.DeadlineExceeded {
		t.Errorf("context error kept code %v", code)
	}
	if CodeName(codes.Unauthenticated) != "UNAUTHENTICATED" || CodeName(codes.Code(99)) != "CODE(99)" {
		t.Errorf("code names")
	}
}
