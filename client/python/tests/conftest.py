"""Fixtures: a real shoald on a free loopback port, an in-process fake server that answers a
chosen status code, and `api`, which runs each test against Client and AsyncClient alike.

shoald is $SHOALD, or build/bin/shoald of this checkout (`make build`). The package is
imported from PYTHONPATH (`make python` -> build/python).
"""
import asyncio
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import grpc
import pytest

import shoal
from shoal.v1 import shoal_pb2

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHOALD = os.environ.get("SHOALD", os.path.join(REPO, "build", "bin", "shoald"))
START_SECONDS = 60  # watchdog: shoald writes its ready file well within this


class Shoald:
    """A shoald process on 127.0.0.1 with a private data directory."""

    def __init__(self, data_dir, extra_args=()):
        if not os.path.exists(SHOALD):
            pytest.fail(f"shoald not found at {SHOALD}: build it (make build) or set SHOALD")
        self.data_dir = data_dir
        self.ready = data_dir + ".ready"
        if os.path.exists(self.ready):
            os.remove(self.ready)
        self.log = open(data_dir + ".log", "ab")
        self.proc = subprocess.Popen(
            [SHOALD, "--data-dir", data_dir, "--grpc-addr", "127.0.0.1:0", "--http-addr",
             "127.0.0.1:0", "--ready-file", self.ready, "--shutdown-grace-seconds", "5",
             "--cpu-threads", "1", "--cache-bytes", str(64 << 20), *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_SECONDS
        while not os.path.exists(self.ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"shoald did not start; see {data_dir}.log")
            time.sleep(0.02)
        with open(self.ready) as f:
            self.port = json.load(f)["grpc_port"]
        self.address = f"127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def workdir():
    d = tempfile.mkdtemp(prefix="shoal-pytest-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def shoald(workdir):
    server = Shoald(os.path.join(workdir, "data"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def strict_shoald(workdir):
    """A shoald that wants an API key and refuses every Search/Get as too large."""
    server = Shoald(os.path.join(workdir, "strict"),
                    ["--api-key", "s3cret", "--max-request-bytes", "1"])
    yield server
    server.stop()


@pytest.fixture
def name(request):
    """A collection name unique to the test (and its client flavour)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[-64:]


class AsyncAsSync:
    """Drives an AsyncClient from synchronous test code on a private event loop, so one test
    body covers both clients. build_index(wait=False) gives an asyncio.Task; `finish()`
    waits for it (and for a concurrent Future from the sync client)."""

    def __init__(self, *args, **kwargs):
        self.loop = asyncio.new_event_loop()

        async def make():
            return shoal.AsyncClient(*args, **kwargs)
        self.client = self.loop.run_until_complete(make())

    def __getattr__(self, attr):
        target = getattr(self.client, attr)
        if not callable(target):
            return target

        def call(*args, **kwargs):
            result = target(*args, **kwargs)
            return self.loop.run_until_complete(result) if asyncio.iscoroutine(result) else result
        return call

    def __setattr__(self, attr, value):
        if attr in ("loop", "client"):
            object.__setattr__(self, attr, value)
        else:
            setattr(self.client, attr, value)

    def finish(self, future):
        return self.loop.run_until_complete(asyncio.wait_for(future, 120))

    def close(self):
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


class SyncClient(shoal.Client):
    def finish(self, future):
        assert isinstance(future, concurrent.futures.Future)
        return future.result(timeout=120)


@pytest.fixture(params=["sync", "async"])
def make_client(request):
    """make_client(address, **kwargs) -> a Client, or an AsyncClient behind AsyncAsSync."""
    made = []

    def make(address, **kwargs):
        c = SyncClient(address, **kwargs) if request.param == "sync" else \
            AsyncAsSync(address, **kwargs)
        c.initial_backoff = 0.001
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


@pytest.fixture
def api(make_client, shoald):
    return make_client(shoald.address)


# ---- a fake server that answers chosen status codes --------------------------------------

class FakeShoal(grpc.GenericRpcHandler):
    """Answers every shoal.v1 and grpc.health.v1 call with the next code of `script` (then
    `default`), an empty message on OK. `calls` counts calls per method name."""

    def __init__(self):
        self.lock = threading.Lock()
        self.script = []
        self.default = grpc.StatusCode.OK
        self.message = "injected"
        self.calls = {}
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((self,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.server.start()

    def answer(self, *codes, default=grpc.StatusCode.OK):
        with self.lock:
            self.script = list(codes)
            self.default = default
            self.calls = {}

    def _next(self, method, context, request=b""):
        with self.lock:
            self.calls[method] = self.calls.get(method, 0) + 1
            code = self.script.pop(0) if self.script else self.default
        if code != grpc.StatusCode.OK:
            context.abort(code, f"{self.message} {code.name}")
        if method == "Search":  # one (empty) result per query, as shoald answers
            n = len(shoal_pb2.SearchRequest.FromString(request).queries)
            return shoal_pb2.SearchResponse(
                results=[shoal_pb2.SearchResult() for _ in range(n)]).SerializeToString()
        return b""

    def service(self, details):
        method = details.method.rsplit("/", 1)[-1]
        if method == "UpsertStream":
            def stream(requests, context):
                for _ in requests:
                    pass
                return self._next(method, context)
            return grpc.stream_unary_rpc_method_handler(stream)
        return grpc.unary_unary_rpc_method_handler(lambda req, ctx: self._next(method, ctx, req))


@pytest.fixture(scope="session")
def fake_server():
    fake = FakeShoal()
    yield fake
    fake.server.stop(None)


@pytest.fixture
def fake(fake_server):
    fake_server.answer()
    return fake_server
