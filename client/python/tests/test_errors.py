"""Status-code mapping and retries, against an in-process fake server that answers the codes
a test chooses (tests/conftest.py FakeShoal), for Client and AsyncClient."""
import grpc
import numpy as np
import pytest

import shoal
from shoal import errors

EXPECTED = {
    grpc.StatusCode.CANCELLED: shoal.Cancelled,
    grpc.StatusCode.UNKNOWN: shoal.Unknown,
    grpc.StatusCode.INVALID_ARGUMENT: shoal.InvalidArgument,
    grpc.StatusCode.DEADLINE_EXCEEDED: shoal.DeadlineExceeded,
    grpc.StatusCode.NOT_FOUND: shoal.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: shoal.AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: shoal.PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: shoal.ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: shoal.FailedPrecondition,
    grpc.StatusCode.ABORTED: shoal.Aborted,
    grpc.StatusCode.OUT_OF_RANGE: shoal.OutOfRange,
    grpc.StatusCode.UNIMPLEMENTED: shoal.Unimplemented,
    grpc.StatusCode.INTERNAL: shoal.Internal,
    grpc.StatusCode.UNAVAILABLE: shoal.Unavailable,
    grpc.StatusCode.DATA_LOSS: shoal.DataLoss,
    grpc.StatusCode.UNAUTHENTICATED: shoal.Unauthenticated,
}

# Every method with arguments that pass the SDK's own checks; the fake answers them all.
CALLS = {
    "create_collection": (("c", 4), {}),
    "drop_collection": (("c",), {}),
    "list_collections": ((), {}),
    "describe": (("c",), {}),
    "upsert": (("c", [1], [[0.0] * 4]), {}),
    "upsert_stream": (("c", [1, 2, 3], np.zeros((3, 4))), {"batch_size": 1}),
    "delete": (("c", [1]), {}),
    "get": (("c", [1]), {}),
    "search": (("c", np.zeros(4)), {}),
    "build_index": (("c",), {}),
    "flush": (("c",), {}),
    "health": ((), {}),
}
RPC_OF = {"create_collection": "CreateCollection", "drop_collection": "DropCollection",
          "list_collections": "ListCollections", "describe": "DescribeCollection",
          "upsert": "Upsert", "upsert_stream": "UpsertStream", "delete": "Delete", "get": "Get",
          "search": "Search", "build_index": "BuildIndex", "flush": "Flush", "health": "Check"}
IDEMPOTENT = ["list_collections", "describe", "upsert", "upsert_stream", "delete", "get",
              "search", "flush", "health"]
NOT_IDEMPOTENT = ["create_collection", "drop_collection", "build_index"]


def invoke(client, method):
    args, kwargs = CALLS[method]
    return getattr(client, "upsert" if method == "upsert_stream" else method)(*args, **kwargs)


def test_every_status_code_has_its_exception_class():
    assert set(EXPECTED) == set(grpc.StatusCode) - {grpc.StatusCode.OK}
    for code, cls in EXPECTED.items():
        e = errors.error_for_code(code, "why")
        assert type(e) is cls and isinstance(e, shoal.ShoalError)
        assert (e.code, e.message, str(e)) == (code, "why", f"{code.name}: why")


@pytest.mark.parametrize("code", list(EXPECTED), ids=lambda c: c.name)
def test_an_error_answer_raises_the_codes_exception_with_the_servers_message(
        make_client, fake, code):
    fake.answer(default=code)
    client = make_client(fake.address, timeout=5)
    with pytest.raises(EXPECTED[code]) as e:
        client.describe("c")
    assert e.value.code == code
    assert e.value.message == f"injected {code.name}"


@pytest.mark.parametrize("method", list(CALLS))
def test_every_method_maps_errors(make_client, fake, method):
    fake.answer(default=grpc.StatusCode.DATA_LOSS)
    client = make_client(fake.address, timeout=5)
    if method == "health":  # NOT_FOUND means "no such service" to the health protocol
        fake.answer(default=grpc.StatusCode.NOT_FOUND)
        assert invoke(client, method) == shoal.HealthStatus.SERVICE_UNKNOWN
        return
    with pytest.raises(shoal.DataLoss, match="injected DATA_LOSS"):
        invoke(client, method)
    assert fake.calls == {RPC_OF[method]: 1}


@pytest.mark.parametrize("method", IDEMPOTENT)
def test_idempotent_calls_are_retried_after_unavailable(make_client, fake, method):
    fake.answer(grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)
    client = make_client(fake.address, timeout=5)
    invoke(client, method)  # the third attempt succeeds
    assert fake.calls == {RPC_OF[method]: 3}


@pytest.mark.parametrize("method", IDEMPOTENT)
def test_retries_stop_after_max_retries(make_client, fake, method):
    fake.answer(default=grpc.StatusCode.UNAVAILABLE)
    client = make_client(fake.address, timeout=5)
    client.max_retries = 2
    with pytest.raises(shoal.Unavailable, match="injected UNAVAILABLE"):
        invoke(client, method)
    assert fake.calls == {RPC_OF[method]: 3}


@pytest.mark.parametrize("method", NOT_IDEMPOTENT)
def test_non_idempotent_calls_are_not_retried_after_unavailable(make_client, fake, method):
    fake.answer(grpc.StatusCode.UNAVAILABLE)  # only the first call fails
    client = make_client(fake.address, timeout=5)
    with pytest.raises(shoal.Unavailable, match="injected UNAVAILABLE"):
        invoke(client, method)
    assert fake.calls == {RPC_OF[method]: 1}


def test_build_index_without_waiting_is_not_retried_either(make_client, fake):
    fake.answer(grpc.StatusCode.UNAVAILABLE)
    client = make_client(fake.address, timeout=5)
    future = client.build_index("c", wait=False)
    with pytest.raises(shoal.Unavailable):
        client.finish(future)
    assert fake.calls == {"BuildIndex": 1}


@pytest.mark.parametrize("code", [grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INTERNAL,
                                  grpc.StatusCode.DEADLINE_EXCEEDED], ids=lambda c: c.name)
def test_other_codes_are_not_retried(make_client, fake, code):
    fake.answer(code)
    client = make_client(fake.address, timeout=5)
    with pytest.raises(EXPECTED[code]):
        client.search("c", np.zeros(4))
    assert fake.calls == {"Search": 1}


def test_a_deadline_raises_deadline_exceeded(make_client, fake):
    import threading
    release = threading.Event()
    original = fake._next

    def slow(method, context, request=b""):
        release.wait(10)
        return original(method, context, request)
    fake._next = slow
    try:
        client = make_client(fake.address, timeout=0.2)
        with pytest.raises(shoal.DeadlineExceeded):
            client.describe("c")
    finally:
        release.set()
        fake._next = original
