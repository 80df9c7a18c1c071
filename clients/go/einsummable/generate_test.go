package einsummable

// Generate against a fake server in the test process (a real gRPC server on loopback whose
// Generate answers as the test says): what is sent, how tokens and errors come back, and that
// Close and the context cancel the server's generation.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type fakeGenerator struct {
	pb.UnimplementedEinsummableServer
	requests  chan *pb.GenerateRequest
	generate  func(*pb.GenerateRequest, pb.Einsummable_GenerateServer) error
	cancelled chan struct{} // closed when a generation saw its context end
	once      sync.Once
}

func (f *fakeGenerator) Generate(request *pb.GenerateRequest, stream pb.Einsummable_GenerateServer) error {
	f.requests <- request
	err := f.generate(request, stream)
	if stream.Context().Err() != nil {
		f.once.Do(func() { close(f.cancelled) })
	}
	return err
}

func startFake(t *testing.T, generate func(*pb.GenerateRequest, pb.Einsummable_GenerateServer) error) (*Client, *fakeGenerator) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeGenerator{
		requests: make(chan *pb.GenerateRequest, 16), generate: generate, cancelled: make(chan struct{}),
	}
	server := grpc.NewServer()
	pb.RegisterEinsummableServer(server, fake)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	client, err := Dial(listener.Addr().String(), WithToken(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, fake
}

func TestGenerateSendsTheRequestAndStreamsTheTokens(t *testing.T) {
	client, fake := startFake(t, func(request *pb.GenerateRequest, stream pb.Einsummable_GenerateServer) error {
		for i := int32(0); i < 3; i++ {
			r := &pb.GenerateResponse{TokenId: 10 + int64(i), Index: i, Seconds: 0.5 * float64(i+1)}
			if i == 2 {
				r.FinishReason = "stop"
			}
			if err := stream.Send(r); err != nil {
				return err
			}
		}
		return nil
	})
	options := GenerateOptions{
		MaxTokens: 5, StopIDs: []int64{12, 13}, Temperature: 0.7, TopK: 3, TopP: 0.9, Seed: 42,
		Options: &CompileOptions{Devices: 2, Planner: "greedy"},
	}
	tokens, err := client.GenerateAll(context.Background(), "lm", []int64{1, 2, 3}, options)
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.GenerateRequest{
		Model: "lm", PromptIds: []int64{1, 2, 3}, MaxTokens: 5, StopIds: []int64{12, 13},
		Sampling: &pb.Sampling{Temperature: 0.7, TopK: 3, TopP: 0.9, Seed: 42},
		Options:  &pb.CompileOptions{Devices: 2, Planner: "greedy"},
	}
	if got := <-fake.requests; !proto.Equal(got, want) {
		t.Errorf("request %v, want %v", got, want)
	}
	if len(tokens) != 3 {
		t.Fatalf("tokens %v", tokens)
	}
	for i, token := range tokens {
		reason := ""
		if i == 2 {
			reason = "stop"
		}
		if token != (GeneratedToken{TokenID: 10 + int64(i), Index: int32(i), FinishReason: reason, Seconds: 0.5 * float64(i+1)}) {
			t.Errorf("token %d: %+v", i, token)
		}
	}
}

// The zero options: greedy, the server's maximum, the server's compile defaults.
func TestGenerateZeroOptions(t *testing.T) {
	client, fake := startFake(t, func(*pb.GenerateRequest, pb.Einsummable_GenerateServer) error { return nil })
	stream, err := client.Generate(context.Background(), "lm", []int64{7}, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for i := 0; i < 2; i++ { // io.EOF, and again
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("Recv %d: %v, want io.EOF", i, err)
		}
	}
	want := &pb.GenerateRequest{Model: "lm", PromptIds: []int64{7}, Sampling: &pb.Sampling{}, Options: &pb.CompileOptions{}}
	if got := <-fake.requests; !proto.Equal(got, want) {
		t.Errorf("request %v, want %v", got, want)
	}
}

// A refusal, before or after tokens, is an *Error of "Generate" with the server's status,
// and every later Recv repeats it.
func TestGenerateErrorsAreErrors(t *testing.T) {
	client, _ := startFake(t, func(request *pb.GenerateRequest, stream pb.Einsummable_GenerateServer) error {
		if len(request.PromptIds) == 0 {
			return status.Error(codes.InvalidArgument, "prompt_ids is empty")
		}
		if err := stream.Send(&pb.GenerateResponse{TokenId: 4}); err != nil {
			return err
		}
		return status.Error(codes.InvalidArgument, "token id 9 at position 1 is outside the table")
	})
	ctx := context.Background()
	tokens, err := client.GenerateAll(ctx, "lm", nil, GenerateOptions{})
	if len(tokens) != 0 {
		t.Errorf("tokens %v", tokens)
	}
	var e *Error
	if !errors.As(err, &e) || e.Method != "Generate" || e.Code() != codes.InvalidArgument ||
		err.Error() != "Generate: prompt_ids is empty (INVALID_ARGUMENT)" {
		t.Errorf("empty prompt: %v", err)
	}

	stream, err := client.Generate(ctx, "lm", []int64{9}, GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if token, err := stream.Recv(); err != nil || token.TokenID != 4 {
		t.Fatalf("first token %+v, %v", token, err)
	}
	_, first := stream.Recv()
	_, again := stream.Recv()
	if status.Code(first) != codes.InvalidArgument || !strings.Contains(first.Error(), "outside the table") || again != first {
		t.Errorf("mid-stream error %v, then %v", first, again)
	}
}

// Close, or the context's end, cancels the generation on the server; Recv then says CANCELLED.
func TestGenerateCancels(t *testing.T) {
	endless := func(request *pb.GenerateRequest, stream pb.Einsummable_GenerateServer) error {
		for i := int32(0); ; i++ {
			if err := stream.Send(&pb.GenerateResponse{TokenId: 1, Index: i}); err != nil {
				return err
			}
			select {
			case <-stream.Context().Done():
				return stream.Context().Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	for _, how := range []string{"Close", "context"} {
		t.Run(how, func(t *testing.T) {
			client, fake := startFake(t, endless)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := client.Generate(ctx, "lm", []int64{1}, GenerateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			if _, err := stream.Recv(); err != nil {
				t.Fatal(err)
			}
			if how == "Close" {
				stream.Close()
			} else {
				cancel()
			}
			select {
			case <-fake.cancelled:
			case <-time.After(10 * time.Second):
				t.Fatal("the server's generation was not cancelled")
			}
			for {
				_, err := stream.Recv()
				if err == nil {
					continue // tokens already on their way
				}
				if status.Code(err) != codes.Canceled {
					t.Errorf("after cancelling: %v", err)
				}
				break
			}
		})
	}
}

// Bad compile options fail before any call, naming the model and the field.
func TestGenerateRefusesBadOptionsBeforeCalling(t *testing.T) {
	client, err := Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, c := range []struct {
		options *CompileOptions
		want    string
	}{
		{&CompileOptions{Planner: "nope"}, "generate with model 'm': planner 'nope'"},
		{&CompileOptions{SequenceEnds: []int64{4}}, "sequence ends are not an option of Generate"},
	} {
		_, err = client.Generate(context.Background(), "m", []int64{1}, GenerateOptions{Options: c.options})
		var asError *Error
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &asError) {
			t.Errorf("got %v, want a plain error containing %q", err, c.want)
		}
	}
}
