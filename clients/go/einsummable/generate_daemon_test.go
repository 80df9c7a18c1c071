package einsummable_test

// Generate against a real daemon (internal/daemontest; skipped without one): a bigram model
// (logits = the row of a table the last token selects; tests/unit/server/generation_test.cc)
// generates the chain of row argmaxes greedily, stops at a stop id, refuses an empty prompt,
// and stops when the context is cancelled.

import (
	"context"
	"io"
	"math/rand"
	"testing"

	"github.com/einsummable/einsummable/clients/go/einsummable"
	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
	"github.com/einsummable/einsummable/clients/go/internal/daemontest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

const vocab = 7

// bigramModel registers model: ids i32 [tokens] → logits [tokens, vocab] = table[ids], table a
// weight, batching along tokens; it uploads a random table and returns it.
func bigramModel(t *testing.T, ctx context.Context, client *einsummable.Client, model string) []float32 {
	t.Helper()
	g := einsummable.NewGraph()
	ids := g.Input("ids", pb.DType_I32, einsummable.Symbol("tokens"))
	table := g.Input("table", pb.DType_F32, einsummable.Fixed("vocab", vocab), einsummable.Fixed("next", vocab))
	g.Save(g.Operator("logits", "embedding", []string{table, ids}, nil))
	graph, err := g.GraphDef()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.RegisterModel(ctx, model, graph, []string{"table"}, &pb.Batching{Dimension: "tokens"}); err != nil {
		t.Fatal(err)
	}
	values := random(rand.New(rand.NewSource(5)), vocab*vocab)
	if _, err := client.UploadTensor(ctx, model, "table", tensor(t, []int64{vocab, vocab}, values)); err != nil {
		t.Fatal(err)
	}
	return values
}

// greedyChain is count tokens after last, each its predecessor's row argmax (the lowest on a
// tie).
func greedyChain(table []float32, last int64, count int) []int64 {
	chain := make([]int64, 0, count)
	for i := 0; i < count; i++ {
		row := table[last*vocab : (last+1)*vocab]
		best := 0
		for j := range row {
			if row[j] > row[best] {
				best = j
			}
		}
		last = int64(best)
		chain = append(chain, last)
	}
	return chain
}

func ids(tokens []einsummable.GeneratedToken) []int64 {
	result := make([]int64, len(tokens))
	for i, token := range tokens {
		result[i] = token.TokenID
	}
	return result
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGenerateOnTheDaemon(t *testing.T) {
	d := daemontest.Start(t, daemontest.Config{})
	client := dial(t, d.Address)
	ctx := context.Background()
	table := bigramModel(t, ctx, client, "bigram")
	chain := greedyChain(table, 4, 8)

	// Greedy: the argmax chain from the prompt's last token, each token streamed with its
	// index and time, the last saying "length".
	stream, err := client.Generate(ctx, "bigram", []int64{2, 4}, einsummable.GenerateOptions{MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	var tokens []einsummable.GeneratedToken
	for {
		token, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	if !equalIDs(ids(tokens), chain) {
		t.Fatalf("greedy: %v, want the argmax chain %v", ids(tokens), chain)
	}
	for i, token := range tokens {
		reason := ""
		if i == len(tokens)-1 {
			reason = "length"
		}
		if token.Index != int32(i) || token.FinishReason != reason || token.Seconds <= 0 {
			t.Errorf("token %d: %+v", i, token)
		}
	}

	// A stop id ends it after producing it (the chain's third token; the first place it
	// appears), finish reason "stop"; compile options go along.
	stop := chain[2]
	want := chain[:3]
	for i, id := range chain {
		if id == stop {
			want = chain[:i+1]
			break
		}
	}
	stopped, err := client.GenerateAll(ctx, "bigram", []int64{2, 4}, einsummable.GenerateOptions{
		MaxTokens: 8, StopIDs: []int64{stop}, Options: &einsummable.CompileOptions{Devices: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !equalIDs(ids(stopped), want) || stopped[len(stopped)-1].FinishReason != "stop" {
		t.Fatalf("stop at %d: %+v, want %v", stop, stopped, want)
	}

	// Sampling with a seed: the same request draws the same tokens.
	sampling := einsummable.GenerateOptions{MaxTokens: 6, Temperature: 1.5, TopK: 4, TopP: 0.95, Seed: 99}
	first, err := client.GenerateAll(ctx, "bigram", []int64{3}, sampling)
	if err != nil {
		t.Fatal(err)
	}
	second, err := client.GenerateAll(ctx, "bigram", []int64{3}, sampling)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 6 || !equalIDs(ids(first), ids(second)) {
		t.Errorf("seeded sampling: %v then %v", ids(first), ids(second))
	}

	// Refusals: from the first Recv, as *Error with the server's code and words.
	_, err = client.GenerateAll(ctx, "bigram", nil, einsummable.GenerateOptions{MaxTokens: 4})
	wantError(t, "empty prompt", err, codes.InvalidArgument, "prompt_ids is empty")
	_, err = client.GenerateAll(ctx, "nope", []int64{1}, einsummable.GenerateOptions{MaxTokens: 4})
	wantError(t, "unknown model", err, codes.NotFound, "nope")

	// Cancelling the context mid-stream ends the generation: CANCELLED, long before the
	// server's maximum of 4096 tokens.
	cancelled, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err = client.Generate(cancelled, "bigram", []int64{2, 4}, einsummable.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	received := 0
	for ; received < 2; received++ {
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("before cancelling: %v", err)
		}
	}
	cancel()
	for {
		_, err := stream.Recv()
		if err == nil {
			received++
			continue
		}
		if status.Code(err) != codes.Canceled {
			t.Errorf("after cancelling: %v, want CANCELLED", err)
		}
		break
	}
	if received >= 4096 {
		t.Errorf("the generation ran to its end (%d tokens) after cancelling", received)
	}

	// The daemon goes on: serving, and a generation after it is the chain again.
	serving, err := client.Health(ctx, "")
	if err != nil || serving != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after cancelling: %v, %v", serving, err)
	}
	again, err := client.GenerateAll(ctx, "bigram", []int64{2, 4}, einsummable.GenerateOptions{MaxTokens: 8})
	if err != nil || !equalIDs(ids(again), chain) {
		t.Errorf("after cancelling: %v, %v; want %v", ids(again), err, chain)
	}
}
