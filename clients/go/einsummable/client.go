// Package einsummable is a thin Go client of the Einsummable daemon (einsummabled): one method
// per RPC of proto/einsummable/v1/service.proto, mirroring the Python client
// (clients/python/src/einsummable/client.py) in names, defaults and behaviour.
//
// Requests and answers are the generated messages of package einsummablepb; helpers move
// float32 (and float64) slices in and out of wire tensors (NewTensor, Float32s), and Graph
// builds a GraphDef. Every failed call returns an *Error carrying the gRPC status, so
// status.Code(err) is the server's code and its message names the culprit.
//
// A session, in outline:
//
//	client, err := einsummable.Dial("127.0.0.1:50051")
//	...
//	client.RegisterModel(ctx, "ffn", graph, []string{"w1", "w2"}, nil)
//	client.UploadTensor(ctx, "ffn", "w1", w1)
//	client.UploadTensor(ctx, "ffn", "w2", w2)
//	result, err := client.Execute(ctx, "ffn", map[string]*einsummablepb.Tensor{"x": x},
//		map[string]int64{"tokens": 64}, &einsummable.CompileOptions{Devices: 4})
//	y, err := result.Float32s("y")
//
// cmd/ffn is the whole program.
package einsummable

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	pb "github.com/einsummable/einsummable/clients/go/einsummablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	// DefaultServer is the daemon's default --listen address.
	DefaultServer = "127.0.0.1:50051"
	// DefaultChunkBytes is the size of UploadTensor's chunks: well under gRPC's default 4 MiB
	// message limit.
	DefaultChunkBytes = 1 << 20
	// DefaultWaitReady bounds WaitReady when its context has no deadline.
	DefaultWaitReady = 10 * time.Second
)

// Planners, schedules and objectives CompileOptions accepts (service.proto CompileOptions).
var (
	Planners  = []string{"dp", "greedy", "random", "data-parallel", "megatron", "ulysses", "row-sharded"}
	Schedules = []string{"optimized", "naive", "ai"}
	// "cost" is the old name of "bytes", which the server still accepts.
	Objectives = []string{"bytes", "time", "search", "cost"}
)

// ResolveServer is server, else $EINSUMMABLE_SERVER, else DefaultServer.
func ResolveServer(server string) string {
	if server != "" {
		return server
	}
	if env := os.Getenv("EINSUMMABLE_SERVER"); env != "" {
		return env
	}
	return DefaultServer
}

// Option configures Dial.
type Option func(*settings)

type settings struct {
	token       *string
	timeout     time.Duration
	tls         bool
	rootsPEM    []byte
	rootsFile   string
	tlsConfig   *tls.Config
	chunkBytes  int
	dialOptions []grpc.DialOption
}

// WithToken sends "authorization: Bearer <token>" on every call (the daemon's --token_file).
// Without this option the token is $EINSUMMABLE_TOKEN; WithToken("") sends none. Without TLS
// the token crosses the connection in the clear, as it may on loopback.
func WithToken(token string) Option { return func(s *settings) { s.token = &token } }

// WithTimeout bounds every call (none by default): a call's context gets this deadline unless
// it has an earlier one.
func WithTimeout(timeout time.Duration) Option { return func(s *settings) { s.timeout = timeout } }

// WithTLS connects with TLS, verifying the server against the system's roots.
func WithTLS() Option { return func(s *settings) { s.tls = true } }

// WithRootCertificates connects with TLS, trusting the PEM certificates given (the daemon's
// --tls_cert, for a self-signed one).
func WithRootCertificates(pem []byte) Option {
	return func(s *settings) { s.tls, s.rootsPEM = true, pem }
}

// WithRootCertificatesFile is WithRootCertificates with the PEM read from path.
func WithRootCertificatesFile(path string) Option {
	return func(s *settings) { s.tls, s.rootsFile = true, path }
}

// WithTLSConfig connects with TLS configured by config (client certificates, a server name).
func WithTLSConfig(config *tls.Config) Option {
	return func(s *settings) { s.tls, s.tlsConfig = true, config }
}

// WithChunkBytes sets UploadTensor's chunk size (default DefaultChunkBytes).
func WithChunkBytes(bytes int) Option { return func(s *settings) { s.chunkBytes = bytes } }

// WithDialOptions adds gRPC dial options, after the client's own (so they win).
func WithDialOptions(options ...grpc.DialOption) Option {
	return func(s *settings) { s.dialOptions = append(s.dialOptions, options...) }
}

// bearerToken is the per-call credential of WithToken.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false: the daemon takes a token over plaintext on loopback.
func (bearerToken) RequireTransportSecurity() bool { return false }

// grpcOptions turns settings into gRPC's dial options, checking them.
func (s *settings) grpcOptions() ([]grpc.DialOption, error) {
	if s.chunkBytes <= 0 {
		return nil, fmt.Errorf("chunk bytes must be positive, got %d", s.chunkBytes)
	}
	if s.timeout < 0 {
		return nil, fmt.Errorf("timeout must not be negative, got %v", s.timeout)
	}
	options := []grpc.DialOption{grpc.WithDefaultCallOptions(
		// Outputs can be larger than gRPC's 4 MiB default; the server bounds what it sends
		// and receives (--max_message_bytes).
		grpc.MaxCallRecvMsgSize(math.MaxInt32),
		grpc.MaxCallSendMsgSize(math.MaxInt32),
	)}
	if s.tls {
		config := &tls.Config{MinVersion: tls.VersionTLS12}
		if s.tlsConfig != nil {
			config = s.tlsConfig.Clone()
		}
		pem, source := s.rootsPEM, "the root certificates given"
		if s.rootsFile != "" {
			read, err := os.ReadFile(s.rootsFile)
			if err != nil {
				return nil, fmt.Errorf("root certificates: %w", err)
			}
			pem, source = read, s.rootsFile
		}
		if pem != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("root certificates: no PEM certificate in %s", source)
			}
			config.RootCAs = pool
		}
		options = append(options, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	} else {
		options = append(options, grpc.WithInsecure())
	}
	if token := s.resolvedToken(); token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearerToken(token)))
	}
	return append(options, s.dialOptions...), nil
}

// resolvedToken is WithToken's token, else $EINSUMMABLE_TOKEN.
func (s *settings) resolvedToken() string {
	if s.token != nil {
		return *s.token
	}
	return os.Getenv("EINSUMMABLE_TOKEN")
}

// Client is a connection to an einsummabled daemon; safe for concurrent use.
type Client struct {
	server     string
	timeout    time.Duration
	chunkBytes int
	conn       *grpc.ClientConn
	stub       pb.EinsummableClient
	health     healthpb.HealthClient
}

// Dial connects to server ("host:port", "[::1]:port", "unix:PATH"; "" = ResolveServer's
// default). The connection is made lazily: an unreachable server shows at the first call as
// codes.Unavailable (WaitReady waits for it). Errors here are bad options, naming the option.
func Dial(server string, opts ...Option) (*Client, error) {
	s := settings{chunkBytes: DefaultChunkBytes}
	for _, opt := range opts {
		opt(&s)
	}
	options, err := s.grpcOptions()
	if err != nil {
		return nil, fmt.Errorf("einsummable.Dial: %w", err)
	}
	server = ResolveServer(server)
	conn, err := grpc.Dial(server, options...)
	if err != nil {
		return nil, fmt.Errorf("einsummable.Dial %s: %w", server, err)
	}
	return &Client{
		server:     server,
		timeout:    s.timeout,
		chunkBytes: s.chunkBytes,
		conn:       conn,
		stub:       pb.NewEinsummableClient(conn),
		health:     healthpb.NewHealthClient(conn),
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Server is the address dialled.
func (c *Client) Server() string { return c.server }

// Stub is the generated stub on the client's connection (its token and TLS), for calls
// the client does not wrap. Its errors are gRPC's own, not *Error.
func (c *Client) Stub() pb.EinsummableClient { return c.stub }

// Conn is the client's gRPC connection, for other services on the daemon (KServe v2).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		return context.WithTimeout(ctx, c.timeout)
	}
	return context.WithCancel(ctx)
}

// WaitReady waits until the server answers GetServerInfo, retrying while it is unavailable;
// bounded by ctx, or by DefaultWaitReady when ctx has no deadline. Any other refusal (a
// missing token: codes.Unauthenticated) is returned at once.
func (c *Client) WaitReady(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultWaitReady)
		defer cancel()
	}
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.stub.GetServerInfo(attempt, &pb.GetServerInfoRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			return rpcError("GetServerInfo", err)
		}
		last = err
		select {
		case <-ctx.Done():
			return &Error{
				Method: "GetServerInfo",
				status: status.Newf(codes.Unavailable, "no answer from %s before the deadline (last error: %s)",
					c.server, status.Convert(last).Message()),
				cause: last,
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Health is the daemon's gRPC health status (grpc.health.v1) for service, "" meaning the
// whole server: SERVING, or NOT_SERVING while every work slot is taken or a drain has begun.
func (c *Client) Health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r, err := c.health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, rpcError("grpc.health.v1.Health/Check", err)
	}
	return r.GetStatus(), nil
}

// ServerInfo is the daemon's version, backend, devices, topology and memory held.
func (c *Client) ServerInfo(ctx context.Context) (*pb.GetServerInfoResponse, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r, err := c.stub.GetServerInfo(ctx, &pb.GetServerInfoRequest{})
	return r, rpcError("GetServerInfo", err)
}

// ListModels is every registered model with its symbols, inputs, weights (uploaded or not),
// saved tensors and compiled plans.
func (c *Client) ListModels(ctx context.Context) ([]*pb.ModelInfo, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r, err := c.stub.ListModels(ctx, &pb.ListModelsRequest{})
	if err != nil {
		return nil, rpcError("ListModels", err)
	}
	return r.GetModels(), nil
}

// WaitForWarmUp polls ListModels every poll until model's warm-up (its token buckets' plans
// compiled in the background after registration, pb.TokenBuckets.SkipWarmUp) is no longer
// running, and returns its state: WARM_UP_DONE, WARM_UP_STOPPED (Message says why) or
// WARM_UP_NONE for a model that has none. It fails when model is not registered or ctx ends.
func (c *Client) WaitForWarmUp(ctx context.Context, model string, poll time.Duration) (*pb.WarmUp, error) {
	for {
		models, err := c.ListModels(ctx)
		if err != nil {
			return nil, err
		}
		var found *pb.ModelInfo
		for _, info := range models {
			if info.GetModel() == model {
				found = info
			}
		}
		if found == nil {
			return nil, fmt.Errorf("WaitForWarmUp: model '%s' is not registered", model)
		}
		if found.GetWarmUp().GetState() != pb.WarmUp_WARM_UP_RUNNING {
			return found.GetWarmUp(), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("WaitForWarmUp: model '%s': %w (ready %v, pending %v)", model,
				ctx.Err(), found.GetWarmUp().GetReady(), found.GetWarmUp().GetPending())
		case <-time.After(poll):
		}
	}
}

// RegisterModel registers graph as model. weights are the inputs uploaded once with
// UploadTensor instead of sent with every Execute; batching (nil: none) lets concurrent
// Executes run as one (docs/server.md "Dynamic batching"), and its Buckets (nil: none) pad
// each Execute to a token bucket so one plan serves every length up to it (docs/server.md
// "Token buckets"). The answer lists the symbols to
// bind and the inputs Execute takes.
func (c *Client) RegisterModel(ctx context.Context, model string, graph *pb.GraphDef, weights []string, batching *pb.Batching) (*pb.RegisterModelResponse, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r, err := c.stub.RegisterModel(ctx, &pb.RegisterModelRequest{
		Model: model, Graph: graph, Weights: weights, Batching: batching,
	})
	return r, rpcError("RegisterModel", err)
}

// UnregisterModel removes model, its weights and its plans.
func (c *Client) UnregisterModel(ctx context.Context, model string) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.stub.UnregisterModel(ctx, &pb.UnregisterModelRequest{Model: model})
	return rpcError("UnregisterModel", err)
}

// UploadTensor streams weight name of model in chunks (WithChunkBytes) and returns the bytes
// the server stored. Every chunk gives its offset and the first the CRC-32 of the whole
// tensor, so the server refuses a lost, repeated or corrupted chunk (service.proto
// UploadTensorChunk); the weight changes only when the whole stream arrived.
func (c *Client) UploadTensor(ctx context.Context, model, name string, tensor *pb.Tensor) (int64, error) {
	if _, err := checkBytes(tensor); err != nil {
		return 0, fmt.Errorf("upload of weight '%s' of model '%s': %w", name, model, err)
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	stream, err := c.stub.UploadTensor(ctx)
	if err != nil {
		return 0, rpcError("UploadTensor", err)
	}
	data := tensor.GetData()
	first := len(data)
	if first > c.chunkBytes {
		first = c.chunkBytes
	}
	chunk := &pb.UploadTensorChunk{
		Model: model, Name: name, Dtype: tensor.GetDtype(), Shape: tensor.GetShape(),
		Data: data[:first], Offset: proto.Int64(0), Crc32: proto.Uint32(crc32.ChecksumIEEE(data)),
	}
	for start := first; ; start += c.chunkBytes {
		// io.EOF: the server ended the stream early; CloseAndRecv has its status.
		if err := stream.Send(chunk); err == io.EOF {
			break
		} else if err != nil {
			return 0, rpcError("UploadTensor", err)
		}
		if start >= len(data) {
			break
		}
		end := start + c.chunkBytes
		if end > len(data) {
			end = len(data)
		}
		chunk = &pb.UploadTensorChunk{Data: data[start:end], Offset: proto.Int64(int64(start))}
	}
	r, err := stream.CloseAndRecv()
	if err != nil {
		return 0, rpcError("UploadTensor", err)
	}
	return r.GetBytes(), nil
}

// CompileOptions say how to compile a shape; zero fields take the server's defaults.
type CompileOptions struct {
	// Devices to split every operator across; 0 = all the server's devices.
	Devices int32
	// Planner: "dp" (default), "greedy", "random", or a hand-written baseline
	// ("data-parallel", "megatron", "ulysses", "row-sharded"; docs/planner.md).
	Planner string
	// Schedule of the exchange programs: "optimized" (default), "naive", "ai" (= optimized).
	Schedule string
	// Objective the dp planner minimises (docs/planner.md "Objectives"): "time" (the server's
	// default, sent as ""; the dynamic programme over predicted time on the server's topology),
	// "bytes" (the paper's cost, bytes moved; "cost" is its old name) or "search" (whole-plan
	// simulated time, searched; slower to compile). Other planners give their own plan whatever
	// it is. Plans of the objectives are cached apart.
	Objective string
	// Seed of the random planner and the synthesis search.
	Seed uint64
	// SequenceEnds, for a model with batching only: where the request's sequences end along
	// the batch dimension (empty: one sequence). Not a planner option, but part of the shape
	// a plan is compiled for (service.proto's sequence_ends).
	SequenceEnds []int64
}

// Validate checks the options as the Python client's CompileOptions does, naming the field.
func (o *CompileOptions) Validate() error {
	if o == nil {
		return nil
	}
	if o.Devices < 0 {
		return fmt.Errorf("devices must be a non-negative count, got %d", o.Devices)
	}
	for _, field := range []struct {
		name, value string
		allowed     []string
	}{{"planner", o.Planner, Planners}, {"schedule", o.Schedule, Schedules}, {"objective", o.Objective, Objectives}} {
		if field.value != "" && !contains(field.allowed, field.value) {
			return fmt.Errorf("%s '%s': expected one of %s", field.name, field.value, strings.Join(field.allowed, ", "))
		}
	}
	return nil
}

func contains(values []string, value string) bool {
	for _, v := range values {
		if v == value {
			return true
		}
	}
	return false
}

func (o *CompileOptions) message() *pb.CompileOptions {
	if o == nil {
		return &pb.CompileOptions{}
	}
	return &pb.CompileOptions{
		Devices: o.Devices, Planner: o.Planner, Schedule: o.Schedule, Objective: o.Objective, Seed: o.Seed,
	}
}

func (o *CompileOptions) sequenceEnds() []int64 {
	if o == nil {
		return nil
	}
	return o.SequenceEnds
}

// Compile compiles model at dims (a size for every symbol, e.g. {"tokens": 64}), or finds the
// plan cached; the answer has the plan key, whether it was a cache hit, and the strategy.
func (c *Client) Compile(ctx context.Context, model string, dims map[string]int64, options *CompileOptions) (*pb.CompileResponse, error) {
	if err := options.Validate(); err != nil {
		return nil, fmt.Errorf("compile model '%s': %w", model, err)
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r, err := c.stub.Compile(ctx, &pb.CompileRequest{
		Model: model, Dims: dims, Options: options.message(), SequenceEnds: options.sequenceEnds(),
	})
	return r, rpcError("Compile", err)
}

// Explain is the plan model gets at dims: its text (the logical plan, the exchange programs
// with simulated times, bytes per device pair, peak memory per device) and predicted costs.
func (c *Client) Explain(ctx context.Context, model string, dims map[string]int64, options *CompileOptions) (*pb.ExplainResponse, error) {
	if err := options.Validate(); err != nil {
		return nil, fmt.Errorf("explain model '%s': %w", model, err)
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r, err := c.stub.Explain(ctx, &pb.ExplainRequest{
		Model: model, Dims: dims, Options: options.message(), SequenceEnds: options.sequenceEnds(),
	})
	return r, rpcError("Explain", err)
}

// ExecuteResult is what Execute returns: the saved tensors by name and how the request ran.
type ExecuteResult struct {
	Outputs        map[string]*pb.Tensor
	CacheHit       bool
	ExecuteSeconds float64
	// A model with batching: the requests its execution answered (this one included), the idle
	// requests that completed it to a preferred size, and the time this one waited for it.
	BatchSize    int32
	BatchPadding int32
	QueueSeconds float64
}

// Float32s are output name's values as float32 (Float32s of the tensor).
func (r *ExecuteResult) Float32s(name string) ([]float32, error) {
	tensor, ok := r.Outputs[name]
	if !ok {
		names := make([]string, 0, len(r.Outputs))
		for output := range r.Outputs {
			names = append(names, output)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("no output '%s' in the answer (outputs: %s)", name, strings.Join(names, ", "))
	}
	values, err := Float32s(tensor)
	if err != nil {
		return nil, fmt.Errorf("output '%s': %w", name, err)
	}
	return values, nil
}

// Execute runs model on inputs (every input that is not a weight, by name) at dims, compiling
// the plan on a cache miss, and returns the saved tensors named in outputs (none named: all).
func (c *Client) Execute(ctx context.Context, model string, inputs map[string]*pb.Tensor, dims map[string]int64, options *CompileOptions, outputs ...string) (*ExecuteResult, error) {
	if err := options.Validate(); err != nil {
		return nil, fmt.Errorf("execute model '%s': %w", model, err)
	}
	request := &pb.ExecuteRequest{
		Model: model, Dims: dims, Options: options.message(), Outputs: outputs,
		SequenceEnds: options.sequenceEnds(),
	}
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	sort.Strings(names) // the same request bytes for the same inputs
	for _, name := range names {
		if inputs[name] == nil {
			return nil, fmt.Errorf("execute model '%s': input '%s' is nil", model, name)
		}
		request.Inputs = append(request.Inputs, &pb.NamedTensor{Name: name, Tensor: inputs[name]})
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r, err := c.stub.Execute(ctx, request)
	if err != nil {
		return nil, rpcError("Execute", err)
	}
	result := &ExecuteResult{
		Outputs:        make(map[string]*pb.Tensor, len(r.GetOutputs())),
		CacheHit:       r.GetCacheHit(),
		ExecuteSeconds: r.GetExecuteSeconds(),
		BatchSize:      r.GetBatchSize(),
		BatchPadding:   r.GetBatchPadding(),
		QueueSeconds:   r.GetQueueSeconds(),
	}
	for _, output := range r.GetOutputs() {
		result.Outputs[output.GetName()] = output.GetTensor()
	}
	return result, nil
}

// GenerateOptions say how Generate picks and stops; the zero value is greedy decoding up to
// the server's maximum of tokens with the server's compile defaults.
type GenerateOptions struct {
	// MaxTokens to generate, at most 4096; 0 = the server's maximum (4096).
	MaxTokens int32
	// StopIDs end the generation after the first of them it produces (which is streamed too).
	StopIDs []int64
	// Temperature 0 is greedy: the largest logit, the lowest id on a tie. Otherwise tokens are
	// drawn from the softmax of the logits divided by it, cut to the TopK largest (0: all) and
	// then to the smallest set whose probabilities sum to at least TopP (0 or 1: all), with a
	// generator seeded by Seed: the same request draws the same tokens.
	Temperature float64
	TopK        int32
	TopP        float64
	Seed        uint64
	// Options compile the model's plans (nil: the server's defaults). SequenceEnds is not one of
	// Generate's: the server lays out the sequence itself.
	Options *CompileOptions
}

func (o *GenerateOptions) request(model string, prompt []int64) (*pb.GenerateRequest, error) {
	if err := o.Options.Validate(); err != nil {
		return nil, err
	}
	if len(o.Options.sequenceEnds()) > 0 {
		return nil, fmt.Errorf("sequence ends are not an option of Generate (the server lays out the sequence)")
	}
	return &pb.GenerateRequest{
		Model: model, PromptIds: prompt, MaxTokens: o.MaxTokens, StopIds: o.StopIDs,
		Sampling: &pb.Sampling{Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, Seed: o.Seed},
		Options:  o.Options.message(),
	}, nil
}

// GeneratedToken is one token of a generation, as the server streams it.
type GeneratedToken struct {
	TokenID int64
	// Index is its place in the generation: 0 for the first new token.
	Index int32
	// FinishReason is set on the last token only: "length" (MaxTokens reached) or "stop" (a
	// stop id produced).
	FinishReason string
	// Seconds from the request's start to this token (the first's: time to first token).
	Seconds float64
}

// GenerateStream is a generation in progress: Recv each token until io.EOF. Not safe for
// concurrent Recv; Close may be called from any goroutine.
type GenerateStream struct {
	stream pb.Einsummable_GenerateClient
	cancel context.CancelFunc
	err    error // io.EOF or the *Error that ended the stream, returned again by later Recvs
}

// Recv is the next token; io.EOF after the last one (the one with a FinishReason). A refusal
// of the request (an unknown model, an empty prompt: codes.InvalidArgument) or a failure on
// the way is an *Error of method "Generate"; after Close or the context's end, its code is
// codes.Canceled or codes.DeadlineExceeded. Every error ends the stream and repeats.
func (s *GenerateStream) Recv() (GeneratedToken, error) {
	if s.err != nil {
		return GeneratedToken{}, s.err
	}
	r, err := s.stream.Recv()
	if err != nil {
		if err != io.EOF {
			err = rpcError("Generate", err)
		}
		s.err = err
		s.cancel()
		return GeneratedToken{}, err
	}
	return GeneratedToken{
		TokenID: r.GetTokenId(), Index: r.GetIndex(), FinishReason: r.GetFinishReason(), Seconds: r.GetSeconds(),
	}, nil
}

// Close cancels the generation on the server (which stops at its next token) and releases
// the stream; needed only when leaving before Recv returned an error or io.EOF (deferring it
// is always safe). A Recv after Close ends with codes.Canceled, after any tokens already
// received, unless the stream had ended before.
func (s *GenerateStream) Close() { s.cancel() }

// Generate generates tokens after prompt with model (a model whose one non-weight input is
// token ids and whose saved output is logits, e.g. a converted LLaMA: docs/generation.md),
// streamed as the server chooses them. Errors here are bad options or a stream that could not
// be opened; the server's refusals come from the first Recv. Cancelling ctx, or Close, cancels
// the generation on the server. WithTimeout bounds the whole generation.
//
//	stream, err := client.Generate(ctx, "llama", []int64{1, 15043}, einsummable.GenerateOptions{MaxTokens: 32})
//	if err != nil { ... }
//	defer stream.Close()
//	for {
//		token, err := stream.Recv()
//		if err == io.EOF { break }
//		if err != nil { ... }
//		fmt.Println(token.TokenID)
//	}
func (c *Client) Generate(ctx context.Context, model string, prompt []int64, opts GenerateOptions) (*GenerateStream, error) {
	request, err := opts.request(model, prompt)
	if err != nil {
		return nil, fmt.Errorf("generate with model '%s': %w", model, err)
	}
	ctx, cancel := c.callContext(ctx)
	stream, err := c.stub.Generate(ctx, request)
	if err != nil {
		cancel()
		return nil, rpcError("Generate", err)
	}
	return &GenerateStream{stream: stream, cancel: cancel}, nil
}

// GenerateAll is Generate read to its end: every token, or the tokens before the error.
func (c *Client) GenerateAll(ctx context.Context, model string, prompt []int64, opts GenerateOptions) ([]GeneratedToken, error) {
	stream, err := c.Generate(ctx, model, prompt, opts)
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var tokens []GeneratedToken
	for {
		token, err := stream.Recv()
		if err == io.EOF {
			return tokens, nil
		}
		if err != nil {
			return tokens, err
		}
		tokens = append(tokens, token)
	}
}
