package einsummable

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a call the server (or gRPC on its way there) refused: the RPC and the gRPC status,
// whose message names the tensor, operator, dimension or flag at fault (service.proto lists the
// codes). It implements GRPCStatus, so status.FromError, status.Code and status.Convert see the
// server's status, and errors.As(err, &e) with e of type *Error finds it.
type Error struct {
	// Method is the RPC that failed: "Execute", "UploadTensor", "grpc.health.v1.Health/Check".
	Method string
	status *status.Status
	cause  error
}

// GRPCStatus is the status as the server sent it.
func (e *Error) GRPCStatus() *status.Status { return e.status }

// Code is the status code (codes.InvalidArgument, codes.NotFound, ...).
func (e *Error) Code() codes.Code { return e.status.Code() }

// Message is the server's message, unchanged.
func (e *Error) Message() string { return e.status.Message() }

// Error reads "Execute: input 'x' dimension 1 ('d_model') is 16; got 17 (INVALID_ARGUMENT)",
// as the Python client's errors do.
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%s)", e.Method, e.status.Message(), CodeName(e.status.Code()))
}

// Unwrap is gRPC's own error, for errors.Is/As on it.
func (e *Error) Unwrap() error { return e.cause }

// rpcError wraps an error of a gRPC call as an *Error of method; a context's error
// (cancelled, deadline passed before the call) keeps its code through status.FromContextError.
func rpcError(method string, err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	s, ok := status.FromError(err)
	if !ok {
		s = status.FromContextError(err)
	}
	return &Error{Method: method, status: s, cause: err}
}

// codeNames are the canonical names of the status codes, as the server's documentation,
// Python's grpc.StatusCode and the C++ API spell them (Go's codes.Code.String says
// "InvalidArgument").
var codeNames = map[codes.Code]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// CodeName is the canonical name of a status code: "NOT_FOUND" for codes.NotFound.
func CodeName(code codes.Code) string {
	if name, ok := codeNames[code]; ok {
		return name
	}
	return fmt.Sprintf("CODE(%d)", uint32(code))
}
