"""shoal.Client: the synchronous Python SDK for shoald.

    import numpy as np, shoal
    c = shoal.Client("localhost:7700")
    c.create_collection("docs", dim=4, metric="cosine", index="ivf_flat")
    c.upsert("docs", ids=[1, 2], vectors=np.random.rand(2, 4), progress=True)
    c.build_index("docs")
    for hit in c.search("docs", [0.1, 0.2, 0.3, 0.4], k=2):
        print(hit.id, hit.distance)

Every call has a deadline (`timeout` seconds; an upsert stream and build_index get an hour)
and raises a `shoal.ShoalError` subclass for an error answer. UNAVAILABLE is retried with
jittered exponential backoff (`max_retries`, `initial_backoff` attributes) for idempotent calls
only: list_collections, describe, upsert, delete, get, search, flush and health. create_collection,
drop_collection and build_index are sent once.

Thread-safety: a Client may be shared by threads (gRPC channels are thread-safe).
"""
import collections
import concurrent.futures
import threading
import time
from typing import List, Optional, Union

import grpc

from . import _channel, _ops, _progress, _wire, errors
from ._health import health_pb2
from .v1 import shoal_pb2 as pb

SEARCH_REQUESTS_IN_FLIGHT = 4
SEARCH_STREAM_IN_FLIGHT = 16  # at most shoald's search.stream_max_inflight (default 32)


class Client:
    """A connection to one shoald. `address` is "host:port"; `api_key` is sent as
    `authorization: Bearer <key>`; `timeout` is each call's deadline in seconds; `tls` is
    None (plaintext), True (system roots) or a shoal.TlsConfig."""

    max_retries = 3
    initial_backoff = 0.1

    def __init__(self, address: str, api_key: Optional[str] = None, timeout: float = 30.0,
                 tls: Union[None, bool, _channel.TlsConfig] = None):
        self.address = address
        self.timeout = timeout
        tls_cfg = _channel.tls_config(tls)
        options = _channel.channel_args(tls_cfg)
        if tls_cfg is None:
            self._channel = grpc.insecure_channel(address, options=options)
        else:
            self._channel = grpc.secure_channel(address, tls_cfg.credentials(), options=options)
        self._metadata = _channel.metadata(api_key)
        self._unary = {
            name: self._channel.unary_unary(_ops.SERVICE + name,
                                            request_serializer=_ops.serializer(req),
                                            response_deserializer=resp.FromString)
            for name, (req, resp, _) in _ops.METHODS.items()}
        self._upsert_stream = self._channel.stream_unary(
            _ops.SERVICE + "UpsertStream", request_serializer=_wire.identity,
            response_deserializer=pb.UpsertResponse.FromString)
        self._search_stream = self._channel.stream_stream(
            _ops.SERVICE + "SearchStream", request_serializer=_wire.identity,
            response_deserializer=pb.SearchResponse.FromString)
        self._health = self._channel.unary_unary(
            _ops.HEALTH_CHECK, request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)
        self._background = None
        self._background_lock = threading.Lock()

    # ---- plumbing ---------------------------------------------------------------------------

    def _retry(self, attempt, idempotent: bool):
        """Runs attempt(); retries UNAVAILABLE for idempotent calls; raises ShoalError."""
        policy = _channel.RetryPolicy(self.max_retries if idempotent else 0, self.initial_backoff)
        delays = policy.delays()
        while True:
            try:
                return attempt()
            except grpc.RpcError as e:
                delay = next(delays, None) if _channel.is_retryable(e) else None
                if delay is None:
                    raise errors.from_rpc_error(e) from None
                time.sleep(delay)

    def _call(self, method: str, request, timeout: Optional[float] = None):
        idempotent = _ops.METHODS[method][2]
        rpc = self._unary[method]
        return self._retry(
            lambda: rpc(request, timeout=timeout or self.timeout, metadata=self._metadata),
            idempotent)

    def close(self):
        """Closes the channel; a build_index(wait=False) still running is abandoned."""
        if self._background is not None:
            self._background.shutdown(wait=False)
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- collections ------------------------------------------------------------------------

    def create_collection(self, name: str, dim: int, metric: str = "l2", index: str = "flat",
                          nlist: int = 0, pq_m: int = 0, pq_bits: int = 0) -> None:
        """Creates a collection. metric: "l2" | "ip" | "cosine"; index: "flat" | "ivf_flat" |
        "ivf_sq8" | "ivf_pq"; nlist 0 = chosen at build time; pq_m for ivf_pq (divides dim);
        pq_bits for ivf_pq: 0 or 8 = 8-bit codes, 4 = fast-scan (pq_m even).
        Raises AlreadyExists, InvalidArgument."""
        self._call("CreateCollection",
                   _ops.create_request(name, dim, metric, index, nlist, pq_m, pq_bits))

    def drop_collection(self, name: str) -> None:
        """Drops a collection and its files. Raises NotFound."""
        self._call("DropCollection", pb.DropCollectionRequest(name=name))

    def list_collections(self) -> List[_wire.CollectionInfo]:
        """Every collection, broken ones included (index_state "broken"), sorted by name."""
        resp = self._call("ListCollections", pb.ListCollectionsRequest())
        return [_wire.info_from_proto(c) for c in resp.collections]

    def count(self, name: str, filter: Optional[str] = None) -> int:
        """Live points that satisfy `filter` (None: every live point), exactly."""
        return self._call("Count", pb.CountRequest(collection=name, filter=filter or "")).count

    def describe(self, name: str) -> _wire.CollectionInfo:
        """The collection's schema, counts and index state (with build progress while
        building). Raises NotFound."""
        return _wire.info_from_proto(
            self._call("DescribeCollection", pb.DescribeCollectionRequest(name=name)))

    # ---- points -----------------------------------------------------------------------------

    def upsert(self, name: str, ids, vectors, attributes=None, batch_size: Optional[int] = None,
               progress=None) -> int:
        """Inserts or replaces points: ids (n,) unsigned integers, vectors (n, dim) floats
        (numpy arrays or lists), attributes None or n dicts of str -> int | float | str | bool,
        or a list of them (several tags: a filter matches a list when any element does).

        Input larger than `batch_size` points (default: about 2 MiB per message) is streamed as
        several messages over one UpsertStream call; durable when this returns. `progress` is
        None, True (a bar on a terminal) or progress(done, total). Returns the number of points
        upserted. A stream cut by UNAVAILABLE is sent again from the start (upserts are keyed
        by id), and the progress count starts again from 0.
        """
        plan = _ops.UpsertPlan(name, ids, vectors, attributes, batch_size)
        report = _progress.reporter(progress)
        chunks = plan.chunks()
        if len(chunks) == 1:
            resp = self._call("Upsert", plan.encode(*chunks[0]))
            if report:
                report(plan.total, plan.total)
            return resp.upserted
        return self._retry(lambda: self._stream_once(plan, chunks, report), idempotent=True)

    def _stream_once(self, plan, chunks, report):
        failure = []

        def messages():
            for lo, hi in chunks:
                yield plan.encode(lo, hi)
                if report:
                    try:
                        report(hi, plan.total)
                    except BaseException as e:  # fail the call, re-raise it to the caller
                        failure.append(e)
                        raise
        try:
            resp = self._upsert_stream(messages(), timeout=_channel.LONG_CALL_SECONDS,
                                       metadata=self._metadata)
        except grpc.RpcError:
            if failure:
                raise failure[0] from None
            raise
        return resp.upserted

    def delete(self, name: str, ids) -> int:
        """Deletes points by id; returns how many of them existed."""
        return sum(self._call("Delete", r).deleted for r in _ops.delete_requests(name, ids))

    def get(self, name: str, ids, include_vectors: bool = False) -> List[_wire.Point]:
        """The points with these ids that exist, in request order (shoal.Point: .id, .vector
        (numpy float32, or None without include_vectors), .attributes)."""
        reqs = _ops.get_requests(name, ids, include_vectors)
        return _ops.get_answer([self._call("Get", r) for r in reqs], include_vectors)

    # ---- search -----------------------------------------------------------------------------

    def search(self, name: str, queries, k: int = 10, nprobe: Optional[int] = None,
               refine_factor: Optional[int] = None, filter: Optional[str] = None):
        """k nearest neighbours. queries: one vector (1-D) -> one SearchResult, or a 2-D
        array -> a list with one SearchResult per row. nprobe None = the collection's default;
        refine_factor (SQ/PQ) re-ranks k * refine_factor candidates exactly. Large query sets
        are split into several requests, a few in flight at once. filter: only points that
        satisfy it (docs/filtering.md), e.g. 'tenant = 42 and year >= 2024'; every query gets
        min(k, matching points) results."""
        plan = _ops.SearchPlan(name, queries, k, nprobe, refine_factor, filter)
        requests = plan.requests()
        if len(requests) == 1:
            return plan.answer([self._call("Search", requests[0])])
        return plan.answer(self._search_pipelined(requests))

    def _search_pipelined(self, requests):
        """Keeps SEARCH_REQUESTS_IN_FLIGHT requests outstanding, collecting answers in order."""
        rpc = self._unary["Search"]
        responses = []
        window = collections.deque()
        try:
            for i in range(len(requests) + SEARCH_REQUESTS_IN_FLIGHT):
                if i < len(requests):
                    window.append((i, rpc.future(requests[i], timeout=self.timeout,
                                                 metadata=self._metadata)))
                if len(window) < SEARCH_REQUESTS_IN_FLIGHT and i < len(requests):
                    continue
                if not window:
                    break
                j, future = window.popleft()
                try:
                    responses.append(future.result())
                except grpc.RpcError as e:
                    if not _channel.is_retryable(e):
                        raise errors.from_rpc_error(e) from None
                    responses.append(self._call("Search", requests[j]))  # with backoff
        finally:
            for _, future in window:
                future.cancel()
        return responses

    def search_many(self, name: str, queries, k: int = 10, nprobe: Optional[int] = None,
                    refine_factor: Optional[int] = None, batch: int = 1,
                    in_flight: int = SEARCH_STREAM_IN_FLIGHT, filter: Optional[str] = None):
        """search() for many queries over one SearchStream: messages of `batch` queries, at
        most `in_flight` unanswered, each answered as soon as it is done. Returns one
        SearchResult per row, in query order; the first failed message raises its error. Each
        message has `timeout` seconds. Cheaper per query than one search() call each, since
        the calls' fixed cost is paid once."""
        plan = _ops.StreamPlan(name, queries, k, nprobe, refine_factor, batch, in_flight,
                               self.timeout, filter)
        window = threading.Semaphore(plan.in_flight)
        stop = threading.Event()

        def messages():
            for i in range(plan.messages):
                while not window.acquire(timeout=0.1):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                yield plan.message(i)

        call = self._search_stream(messages(), timeout=plan.stream_deadline(self.timeout),
                                   metadata=self._metadata)
        responses = []
        try:
            for resp in call:
                window.release()
                responses.append(resp)
                if resp.HasField("error"):
                    break
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            stop.set()
            call.cancel()
        return plan.collect(responses)

    # ---- maintenance ------------------------------------------------------------------------

    def build_index(self, name: str, wait: bool = True):
        """Trains the IVF index over every vector and writes a segment; searches keep being
        answered meanwhile (describe() shows index_state "building", build_phase and
        build_percent). shoald answers BuildIndex when the build is done: wait=True blocks and
        returns the server's message; wait=False returns at once with a
        concurrent.futures.Future of that message (its result() raises the ShoalError).
        Not retried after UNAVAILABLE."""
        if wait:
            return self._build(name)
        with self._background_lock:
            if self._background is None:
                self._background = concurrent.futures.ThreadPoolExecutor(
                    max_workers=2, thread_name_prefix="shoal-build")
        return self._background.submit(self._build, name)

    def _build(self, name):
        return self._call("BuildIndex", pb.BuildIndexRequest(collection=name),
                          timeout=_channel.LONG_CALL_SECONDS).message

    def flush(self, name: str) -> str:
        """Writes the collection's memtable to a segment; returns the server's message."""
        return self._call("Flush", pb.FlushRequest(collection=name),
                          timeout=_channel.LONG_CALL_SECONDS).message

    def health(self, collection: Optional[str] = None) -> _wire.HealthStatus:
        """grpc.health.v1 Check of the server (collection None) or of one collection
        (service "shoal.v1.Shoal/<name>"): SERVING, NOT_SERVING (dropped, broken, or the demo
        still loading) or SERVICE_UNKNOWN (no such collection), as `shoalctl health` prints."""
        try:
            resp = self._retry(
                lambda: self._health(_ops.health_request(collection), timeout=self.timeout,
                                     metadata=self._metadata), idempotent=True)
        except errors.NotFound:
            return _wire.HealthStatus.SERVICE_UNKNOWN
        return _ops.health_status(resp)
