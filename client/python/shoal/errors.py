"""Exceptions raised by the Shoal SDK, one per gRPC status code.

Every error the server answers is raised as a subclass of `ShoalError` carrying the server's
message (`.message`, which names the offending field) and the gRPC code (`.code`, a
`grpc.StatusCode`). Catch `ShoalError` for all of them, or a subclass for one code:

    try:
        client.create_collection("docs", dim=384)
    except shoal.AlreadyExists:
        pass

Argument errors found before a request is sent (a vector of the wrong length, an unknown
metric name) are raised as `InvalidArgument` too, with `code` INVALID_ARGUMENT.
"""
import grpc

__all__ = [
    "ShoalError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "error_for_code",
]


class ShoalError(Exception):
    """An error from shoald (or from the SDK's own argument checks)."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code.name}: {self.message}"


class Cancelled(ShoalError):
    code = grpc.StatusCode.CANCELLED


class Unknown(ShoalError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(ShoalError, ValueError):
    """The request is malformed; the message names the field (e.g. 'k: must be ...')."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(ShoalError, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(ShoalError, LookupError):
    """No such collection."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ShoalError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(ShoalError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(ShoalError):
    """Over a server limit (in-flight searches, request memory, message size): back off."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(ShoalError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(ShoalError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(ShoalError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(ShoalError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ShoalError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(ShoalError, ConnectionError):
    """The server is unreachable or shutting down (retried first for idempotent calls)."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(ShoalError):
    """The collection is broken on disk (describe() says why); only drop_collection works."""
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(ShoalError):
    """Missing or wrong API key (Client(api_key=...))."""
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented,
    Internal, Unavailable, DataLoss, Unauthenticated)}


_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def error_for_code(code, message):
    """The exception for a grpc.StatusCode (or its number, as SearchResponse.error carries it),
    with the server's message."""
    if isinstance(code, int):
        code = _BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(code, ShoalError)(message, code)


def from_rpc_error(e):
    """Converts a grpc.RpcError (or grpc.aio.AioRpcError) into a ShoalError."""
    code = e.code() if callable(getattr(e, "code", None)) else grpc.StatusCode.UNKNOWN
    details = e.details() if callable(getattr(e, "details", None)) else str(e)
    return error_for_code(code, details or code.name)
