"""shoal.AsyncClient: the same API as shoal.Client, every method a coroutine (grpc.aio).

    async with shoal.AsyncClient("localhost:7700") as c:
        result = await c.search("docs", query, k=10)

Create it inside the event loop that uses it (grpc.aio channels belong to one loop).
Errors, retries (idempotent calls only) and deadlines are as in shoal.Client.
"""
import asyncio
from typing import List, Optional, Union

import grpc
import grpc.aio

from . import _channel, _ops, _progress, _wire, errors
from ._health import health_pb2
from .v1 import shoal_pb2 as pb

SEARCH_REQUESTS_IN_FLIGHT = 4
SEARCH_STREAM_IN_FLIGHT = 16  # at most shoald's search.stream_max_inflight (default 32)


class AsyncClient:
    """Asynchronous counterpart of shoal.Client; same constructor arguments."""

    max_retries = 3
    initial_backoff = 0.1

    def __init__(self, address: str, api_key: Optional[str] = None, timeout: float = 30.0,
                 tls: Union[None, bool, _channel.TlsConfig] = None):
        self.address = address
        self.timeout = timeout
        tls_cfg = _channel.tls_config(tls)
        options = _channel.channel_args(tls_cfg)
        if tls_cfg is None:
            self._channel = grpc.aio.insecure_channel(address, options=options)
        else:
            self._channel = grpc.aio.secure_channel(address, tls_cfg.credentials(),
                                                    options=options)
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

    async def _retry(self, attempt, idempotent: bool):
        policy = _channel.RetryPolicy(self.max_retries if idempotent else 0, self.initial_backoff)
        delays = policy.delays()
        while True:
            try:
                return await attempt()
            except grpc.RpcError as e:
                delay = next(delays, None) if _channel.is_retryable(e) else None
                if delay is None:
                    raise errors.from_rpc_error(e) from None
                await asyncio.sleep(delay)

    async def _call(self, method: str, request, timeout: Optional[float] = None):
        rpc = self._unary[method]
        return await self._retry(
            lambda: rpc(request, timeout=timeout or self.timeout, metadata=self._metadata),
            _ops.METHODS[method][2])

    async def close(self):
        await self._channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def create_collection(self, name: str, dim: int, metric: str = "l2",
                                index: str = "flat", nlist: int = 0, pq_m: int = 0,
                                pq_bits: int = 0) -> None:
        await self._call("CreateCollection",
                         _ops.create_request(name, dim, metric, index, nlist, pq_m, pq_bits))

    async def drop_collection(self, name: str) -> None:
        await self._call("DropCollection", pb.DropCollectionRequest(name=name))

    async def list_collections(self) -> List[_wire.CollectionInfo]:
        resp = await self._call("ListCollections", pb.ListCollectionsRequest())
        return [_wire.info_from_proto(c) for c in resp.collections]

    async def count(self, name: str, filter: Optional[str] = None) -> int:
        """As shoal.Client.count."""
        return (await self._call("Count",
                                 pb.CountRequest(collection=name, filter=filter or ""))).count

    async def describe(self, name: str) -> _wire.CollectionInfo:
        return _wire.info_from_proto(
            await self._call("DescribeCollection", pb.DescribeCollectionRequest(name=name)))

    async def upsert(self, name: str, ids, vectors, attributes=None,
                     batch_size: Optional[int] = None, progress=None) -> int:
        plan = _ops.UpsertPlan(name, ids, vectors, attributes, batch_size)
        report = _progress.reporter(progress)
        chunks = plan.chunks()
        if len(chunks) == 1:
            resp = await self._call("Upsert", plan.encode(*chunks[0]))
            if report:
                report(plan.total, plan.total)
            return resp.upserted
        return await self._retry(lambda: self._stream_once(plan, chunks, report), True)

    async def _stream_once(self, plan, chunks, report):
        call = self._upsert_stream(timeout=_channel.LONG_CALL_SECONDS, metadata=self._metadata)
        try:
            for lo, hi in chunks:
                await call.write(plan.encode(lo, hi))
                if report:
                    report(hi, plan.total)
            await call.done_writing()
        except (grpc.RpcError, asyncio.InvalidStateError):
            pass  # the server ended the call: its own status (awaited below) says why
        except BaseException:
            call.cancel()
            raise
        return (await call).upserted

    async def delete(self, name: str, ids) -> int:
        total = 0
        for r in _ops.delete_requests(name, ids):
            total += (await self._call("Delete", r)).deleted
        return total

    async def get(self, name: str, ids, include_vectors: bool = False) -> List[_wire.Point]:
        responses = [await self._call("Get", r)
                     for r in _ops.get_requests(name, ids, include_vectors)]
        return _ops.get_answer(responses, include_vectors)

    async def search(self, name: str, queries, k: int = 10, nprobe: Optional[int] = None,
                     refine_factor: Optional[int] = None, filter: Optional[str] = None):
        plan = _ops.SearchPlan(name, queries, k, nprobe, refine_factor, filter)
        slots = asyncio.Semaphore(SEARCH_REQUESTS_IN_FLIGHT)

        async def one(request):
            async with slots:
                return await self._call("Search", request)

        return plan.answer(await asyncio.gather(*(one(r) for r in plan.requests())))

    async def search_many(self, name: str, queries, k: int = 10, nprobe: Optional[int] = None,
                          refine_factor: Optional[int] = None, batch: int = 1,
                          in_flight: int = SEARCH_STREAM_IN_FLIGHT, filter: Optional[str] = None):
        """As shoal.Client.search_many: one SearchStream, results in query order."""
        plan = _ops.StreamPlan(name, queries, k, nprobe, refine_factor, batch, in_flight,
                               self.timeout, filter)
        window = asyncio.Semaphore(plan.in_flight)
        call = self._search_stream(timeout=plan.stream_deadline(self.timeout),
                                   metadata=self._metadata)

        async def write():
            for i in range(plan.messages):
                await window.acquire()
                await call.write(plan.message(i))
            await call.done_writing()

        writer = asyncio.ensure_future(write())
        responses = []
        try:
            while len(responses) < plan.messages:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    break
                window.release()
                responses.append(resp)
                if resp.HasField("error"):
                    break
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            writer.cancel()
            call.cancel()
        return plan.collect(responses)

    async def build_index(self, name: str, wait: bool = True):
        """wait=True: returns the server's message when the build is done. wait=False: returns
        at once with an asyncio.Task of that message (describe() shows the build's progress)."""
        coro = self._call("BuildIndex", pb.BuildIndexRequest(collection=name),
                          timeout=_channel.LONG_CALL_SECONDS)
        if wait:
            return (await coro).message

        async def build():
            return (await coro).message
        return asyncio.ensure_future(build())

    async def flush(self, name: str) -> str:
        return (await self._call("Flush", pb.FlushRequest(collection=name),
                                 timeout=_channel.LONG_CALL_SECONDS)).message

    async def health(self, collection: Optional[str] = None) -> _wire.HealthStatus:
        try:
            resp = await self._retry(
                lambda: self._health(_ops.health_request(collection), timeout=self.timeout,
                                     metadata=self._metadata), True)
        except errors.NotFound:
            return _wire.HealthStatus.SERVICE_UNKNOWN
        return _ops.health_status(resp)
