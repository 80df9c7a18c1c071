"""Exceptions.

Two families:

* ``GraphError`` (a ``ValueError``): a graph built wrongly, caught client-side before anything
  reaches the server — a shape mismatch, an unknown scalar function, a duplicate name. The
  message names the operator, the input and the dimension, like the server's would.
* ``EinsummableError``: the server answered with a gRPC error status. One subclass per status
  code (``InvalidArgumentError``, ``NotFoundError``, ...), each carrying the server's message in
  ``details``, the status in ``code`` and the RPC in ``method``. The short aliases
  ``InvalidArgument``, ``NotFound``, ... name the same classes.
"""

from __future__ import annotations


class GraphError(ValueError):
    """A graph that cannot be built: raised by the graph API before contacting the server."""


class EinsummableError(Exception):
    """The server rejected a request; ``details`` is its message, ``code`` the status name."""

    code = "UNKNOWN"

    def __init__(self, details: str, *, method: str = "", code: str | None = None):
        self.details = details
        self.method = method
        if code is not None:
            self.code = code
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{details} ({self.code})")


class CancelledError(EinsummableError):
    code = "CANCELLED"


class UnknownError(EinsummableError):
    code = "UNKNOWN"


class InvalidArgumentError(EinsummableError):
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(EinsummableError):
    code = "DEADLINE_EXCEEDED"


class NotFoundError(EinsummableError):
    code = "NOT_FOUND"


class AlreadyExistsError(EinsummableError):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(EinsummableError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(EinsummableError):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(EinsummableError):
    code = "FAILED_PRECONDITION"


class AbortedError(EinsummableError):
    code = "ABORTED"


class OutOfRangeError(EinsummableError):
    code = "OUT_OF_RANGE"


class UnimplementedError(EinsummableError):
    code = "UNIMPLEMENTED"


class InternalError(EinsummableError):
    code = "INTERNAL"


class UnavailableError(EinsummableError):
    code = "UNAVAILABLE"


class DataLossError(EinsummableError):
    code = "DATA_LOSS"


class UnauthenticatedError(EinsummableError):
    code = "UNAUTHENTICATED"


# Short names, as in the status codes themselves.
Cancelled = CancelledError
Unknown = UnknownError
InvalidArgument = InvalidArgumentError
DeadlineExceeded = DeadlineExceededError
NotFound = NotFoundError
AlreadyExists = AlreadyExistsError
PermissionDenied = PermissionDeniedError
ResourceExhausted = ResourceExhaustedError
FailedPrecondition = FailedPreconditionError
Aborted = AbortedError
OutOfRange = OutOfRangeError
Unimplemented = UnimplementedError
Internal = InternalError
Unavailable = UnavailableError
DataLoss = DataLossError
Unauthenticated = UnauthenticatedError

_BY_CODE = {
    cls.code: cls
    for cls in (
        CancelledError,
        UnknownError,
        InvalidArgumentError,
        DeadlineExceededError,
        NotFoundError,
        AlreadyExistsError,
        PermissionDeniedError,
        ResourceExhaustedError,
        FailedPreconditionError,
        AbortedError,
        OutOfRangeError,
        UnimplementedError,
        InternalError,
        UnavailableError,
        DataLossError,
        UnauthenticatedError,
    )
}


def error_for_code(code: str, details: str, method: str = "") -> EinsummableError:
    """The exception for a status code name such as ``"NOT_FOUND"``."""
    cls = _BY_CODE.get(code, EinsummableError)
    return cls(details, method=method, code=code)


def from_rpc_error(error, method: str = "") -> EinsummableError:
    """Converts a ``grpc.RpcError`` (a ``grpc.Call``) into the matching ``EinsummableError``."""
    try:
        code = error.code().name
        details = error.details() or ""
    except AttributeError:  # not a grpc.Call: keep what we know
        code, details = "UNKNOWN", str(error)
    return error_for_code(code, details, method)
