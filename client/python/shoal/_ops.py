"""What Client and AsyncClient share: request building, chunking and answer decoding.

Each public method is split into a plan (the requests to send, built here from the
arguments) and the transport (sync or grpc.aio, in client.py and aio.py), so both clients
validate, chunk and decode identically.
"""
from typing import List, Optional, Tuple

import numpy as np

from . import _wire, errors
from ._health import health_pb2
from .v1 import shoal_pb2 as pb

SERVICE = "/shoal.v1.Shoal/"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"

# name -> (request serializer or None for raw bytes, response deserializer, idempotent).
# Idempotent calls are retried after UNAVAILABLE: reads, upsert and delete (keyed by id, so
# sending one twice leaves the same state) and flush. CreateCollection, DropCollection and
# BuildIndex are not: a retry after a lost answer would fail (ALREADY_EXISTS, NOT_FOUND) or
# run a second build.
RAW = None
METHODS = {
    "CreateCollection": (pb.CreateCollectionRequest, pb.CreateCollectionResponse, False),
    "DropCollection": (pb.DropCollectionRequest, pb.DropCollectionResponse, False),
    "ListCollections": (pb.ListCollectionsRequest, pb.ListCollectionsResponse, True),
    "DescribeCollection": (pb.DescribeCollectionRequest, pb.CollectionInfo, True),
    "Upsert": (RAW, pb.UpsertResponse, True),
    "Delete": (pb.DeleteRequest, pb.DeleteResponse, True),
    "Get": (pb.GetRequest, pb.GetResponse, True),
    "Search": (RAW, pb.SearchResponse, True),
    "BuildIndex": (pb.BuildIndexRequest, pb.BuildIndexResponse, False),
    "Flush": (pb.FlushRequest, pb.FlushResponse, True),
    "Count": (pb.CountRequest, pb.CountResponse, True),
}
STREAM_METHODS = {"UpsertStream": (RAW, pb.UpsertResponse, True)}

IDS_PER_REQUEST = 100_000  # shoald's limit on ids in one Delete / Get
IDS_PER_GET_WITH_VECTORS = 1024
MESSAGE_TARGET_BYTES = 2 << 20  # upsert / search requests are split to about this size
QUERIES_PER_REQUEST = 10_000  # shoald's limit
RESPONSE_TARGET_BYTES = 16 << 20


def serializer(cls):
    return _wire.identity if cls is RAW else cls.SerializeToString


def create_request(name, dim, metric, index, nlist, pq_m, pq_bits=0):
    return pb.CreateCollectionRequest(
        name=name, dim=int(dim), metric=_wire.metric_enum(metric),
        index=pb.IndexSpec(type=_wire.index_enum(index), nlist=int(nlist), pq_m=int(pq_m),
                           pq_bits=int(pq_bits)))


def health_request(collection: Optional[str]):
    return health_pb2.HealthCheckRequest(
        service=f"shoal.v1.Shoal/{collection}" if collection else "")


def health_status(resp) -> _wire.HealthStatus:
    names = {health_pb2.HealthCheckResponse.SERVING: _wire.HealthStatus.SERVING,
             health_pb2.HealthCheckResponse.NOT_SERVING: _wire.HealthStatus.NOT_SERVING,
             health_pb2.HealthCheckResponse.SERVICE_UNKNOWN: _wire.HealthStatus.SERVICE_UNKNOWN}
    return names.get(resp.status, _wire.HealthStatus.UNKNOWN)


class UpsertPlan:
    """upsert()'s arguments checked and cut into serialized UpsertRequests."""

    def __init__(self, name, ids, vectors, attributes, batch_size):
        self.ids = _wire.as_ids(ids)
        self.vectors = _wire.as_matrix(vectors)
        n = len(self.ids)
        if n == 0:
            raise errors.InvalidArgument("ids: empty")
        if self.vectors.shape[0] != n:
            raise errors.InvalidArgument(
                f"vectors: {self.vectors.shape[0]} rows for {n} ids")
        if attributes is not None:
            attributes = list(attributes)
            if len(attributes) != n:
                raise errors.InvalidArgument(f"attributes: {len(attributes)} entries for {n} ids")
        self.attributes = attributes
        if batch_size is None:
            batch_size = max(1, MESSAGE_TARGET_BYTES // (4 * self.vectors.shape[1] + 16))
        if int(batch_size) < 1:
            raise errors.InvalidArgument("batch_size: must be at least 1")
        self.batch_size = int(batch_size)
        self.name = name
        self.total = n

    def chunks(self) -> List[Tuple[int, int]]:
        return [(i, min(i + self.batch_size, self.total))
                for i in range(0, self.total, self.batch_size)]

    def encode(self, lo, hi) -> bytes:
        attrs = self.attributes[lo:hi] if self.attributes is not None else None
        return _wire.encode_upsert(self.name, self.ids[lo:hi], self.vectors[lo:hi], attrs)


class SearchPlan:
    """search()'s arguments checked and cut into serialized SearchRequests."""

    def __init__(self, name, queries, k, nprobe, refine_factor, filter=None):
        if filter is not None and not isinstance(filter, str):
            raise errors.InvalidArgument(f"filter: must be a string, got {type(filter).__name__}")
        self.filter = filter or ""
        q = np.asarray(queries, dtype="<f4")
        self.single = q.ndim == 1
        if self.single:
            q = q.reshape(1, -1)
        if q.ndim != 2:
            raise errors.InvalidArgument(f"queries: must be 1-D or 2-D, got shape {q.shape}")
        if q.shape[0] == 0:
            raise errors.InvalidArgument("queries: empty")
        self.queries = np.ascontiguousarray(q)
        self.name, self.k = name, int(k)
        self.nprobe = int(nprobe or 0)
        self.refine_factor = int(refine_factor or 0)
        dim = q.shape[1]
        per = min(QUERIES_PER_REQUEST, MESSAGE_TARGET_BYTES // (4 * dim + 8),
                  RESPONSE_TARGET_BYTES // (max(self.k, 1) * 32))
        self.per_request = max(1, per)

    def requests(self) -> List[bytes]:
        q = self.queries
        return [_wire.encode_search(self.name, q[i:i + self.per_request], self.k, self.nprobe,
                                    self.refine_factor, filter=self.filter)
                for i in range(0, len(q), self.per_request)]

    def answer(self, responses):
        results = [r for resp in responses for r in _wire.results_from_proto(resp)]
        if len(results) != len(self.queries):
            raise errors.Internal(
                f"the server answered {len(results)} results for {len(self.queries)} queries")
        return results[0] if self.single else results


class StreamPlan:
    """search_many()'s arguments: SearchStream messages of `batch` queries, tagged by index."""

    def __init__(self, name, queries, k, nprobe, refine_factor, batch, in_flight, timeout,
                 filter=None):
        self.search = SearchPlan(name, queries, k, nprobe, refine_factor, filter)
        if int(batch) < 1 or int(in_flight) < 1:
            raise errors.InvalidArgument("batch and in_flight: must be at least 1")
        self.batch = min(int(batch), self.search.per_request)
        self.in_flight = int(in_flight)
        self.timeout_ms = max(1, int(timeout * 1000)) if timeout else 0
        n = len(self.search.queries)
        self.messages = (n + self.batch - 1) // self.batch

    def message(self, i) -> bytes:
        s, lo = self.search, i * self.batch
        return _wire.encode_search(s.name, s.queries[lo:lo + self.batch], s.k, s.nprobe,
                                   s.refine_factor, tag=i, timeout_ms=self.timeout_ms,
                                   filter=s.filter)

    def stream_deadline(self, timeout):
        """The stream's deadline (seconds): one message timeout per window of messages."""
        return timeout * (self.messages // self.in_flight + 2) if timeout else None

    def collect(self, responses):
        """The answers (any order) as results in query order; the first failed message raises."""
        by_tag = [None] * self.messages
        for resp in responses:
            if resp.HasField("error"):
                raise errors.error_for_code(resp.error.code, resp.error.message)
            if resp.tag >= self.messages or by_tag[resp.tag] is not None:
                raise errors.Internal(f"SearchStream answered tag {resp.tag}, which was not asked")
            by_tag[resp.tag] = resp
        if any(r is None for r in by_tag):
            raise errors.Internal("SearchStream ended before every answer")
        results = self.search.answer(by_tag)
        return [results] if self.search.single else results


def id_chunks(ids, per_request):
    arr = _wire.as_ids(ids)
    if len(arr) == 0:
        raise errors.InvalidArgument("ids: empty")
    return [arr[i:i + per_request] for i in range(0, len(arr), per_request)]


def get_requests(name, ids, include_vectors):
    per = IDS_PER_GET_WITH_VECTORS if include_vectors else IDS_PER_REQUEST
    return [pb.GetRequest(collection=name, ids=chunk.tolist(), include_vectors=include_vectors)
            for chunk in id_chunks(ids, per)]


def get_answer(responses, include_vectors):
    return [_wire.point_from_proto(p, include_vectors) for r in responses for p in r.points]


def delete_requests(name, ids):
    return [pb.DeleteRequest(collection=name, ids=chunk.tolist())
            for chunk in id_chunks(ids, IDS_PER_REQUEST)]
