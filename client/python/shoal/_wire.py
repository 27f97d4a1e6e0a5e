"""Conversions between Python/numpy values and the shoal.v1 messages.

Bulk paths (upsert without attributes, search) encode the request's wire bytes straight from
numpy buffers, and search results are decoded into numpy arrays from the packed `ids` /
`distances` fields (SearchRequest.packed_results), so no per-vector or per-hit Python object
is made. tests/test_wire.py checks the hand-made bytes against protobuf's own encoding.
"""
import dataclasses
import enum
from typing import Dict, Iterator, List, NamedTuple, Optional, Union

import numpy as np

from . import errors
from .v1 import shoal_pb2 as pb

AttributeValue = Union[int, float, str, bool, List[Union[int, float, str, bool]]]

METRICS = {"l2": pb.METRIC_L2, "ip": pb.METRIC_INNER_PRODUCT,
           "inner_product": pb.METRIC_INNER_PRODUCT, "cosine": pb.METRIC_COSINE}
METRIC_NAMES = {pb.METRIC_L2: "l2", pb.METRIC_INNER_PRODUCT: "ip", pb.METRIC_COSINE: "cosine",
                pb.METRIC_UNSPECIFIED: "unspecified"}
INDEXES = {"flat": pb.INDEX_FLAT, "ivf_flat": pb.INDEX_IVF_FLAT, "ivf_sq8": pb.INDEX_IVF_SQ8,
           "ivf_pq": pb.INDEX_IVF_PQ}
INDEX_NAMES = {v: k for k, v in INDEXES.items()}
INDEX_NAMES[pb.INDEX_UNSPECIFIED] = "flat"
STATE_NAMES = {pb.INDEX_STATE_UNSPECIFIED: "unspecified", pb.INDEX_STATE_NONE: "none",
               pb.INDEX_STATE_BUILDING: "building", pb.INDEX_STATE_READY: "ready",
               pb.INDEX_STATE_BROKEN: "broken"}


class HealthStatus(str, enum.Enum):
    """grpc.health.v1 serving status; compares equal to its name ("SERVING", ...)."""
    UNKNOWN = "UNKNOWN"
    SERVING = "SERVING"
    NOT_SERVING = "NOT_SERVING"
    SERVICE_UNKNOWN = "SERVICE_UNKNOWN"

    def __str__(self):
        return self.value


@dataclasses.dataclass
class CollectionInfo:
    """DescribeCollection's answer. metric: "l2" | "ip" | "cosine"; index: "flat" |
    "ivf_flat" | "ivf_sq8" | "ivf_pq"; index_state: "none" | "building" | "ready" | "broken"."""
    name: str
    dim: int
    metric: str
    index: str
    nlist: int
    pq_m: int
    pq_bits: int  # ivf_pq: 0 or 8 = 8-bit codes, 4 = fast-scan
    default_nprobe: int
    num_vectors: int
    num_indexed: int
    num_segments: int
    index_state: str
    disk_bytes: int
    build_phase: str  # while "building": training, assigning, writing, ...
    build_percent: int  # progress of build_phase, 0..100
    error: str  # while "broken": why the collection did not open
    attribute_memory_bytes: int = 0  # attributes' columns for filtering, in memory


@dataclasses.dataclass
class Point:
    """A stored point (get()). vector is None unless include_vectors=True."""
    id: int
    vector: Optional[np.ndarray]
    attributes: Dict[str, AttributeValue]


@dataclasses.dataclass
class QueryStats:
    partitions_probed: int = 0
    partitions_cached: int = 0
    bytes_read: int = 0
    vectors_scanned: int = 0
    queue_us: int = 0
    io_us: int = 0
    cpu_us: int = 0
    # Filtered searches: "exact_matches", "selective_ivf" or "ivf_bitmap" ("" without a
    # filter), the points that satisfy the filter, the partitions passed over, the matching
    # points scanned.
    plan: str = ""
    rows_matched: int = 0
    partitions_skipped: int = 0
    matching_rows_scanned: int = 0


class Hit(NamedTuple):
    id: int
    distance: float  # l2: squared distance (ascending); ip / cosine: similarity (descending)


class SearchResult:
    """One query's neighbours, nearest first.

    `ids` (uint64) and `distances` (float32) are numpy arrays; iterating yields `Hit`s
    (`.id`, `.distance`); `stats` says what the search touched (partitions, bytes, cache).
    """
    __slots__ = ("ids", "distances", "stats")

    def __init__(self, ids: np.ndarray, distances: np.ndarray, stats: QueryStats):
        self.ids = ids
        self.distances = distances
        self.stats = stats

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[Hit]:
        return (Hit(int(i), float(d)) for i, d in zip(self.ids, self.distances))

    def __getitem__(self, i: int) -> Hit:
        return Hit(int(self.ids[i]), float(self.distances[i]))

    def __repr__(self):
        return f"SearchResult(ids={self.ids!r}, distances={self.distances!r})"


# ---- argument checks ----------------------------------------------------------------------

def metric_enum(metric: str) -> int:
    try:
        return METRICS[str(metric).lower()]
    except KeyError:
        raise errors.InvalidArgument(
            f"metric: {metric!r} is not one of 'l2', 'ip', 'cosine'") from None


def index_enum(index: str) -> int:
    try:
        return INDEXES[str(index).lower()]
    except KeyError:
        raise errors.InvalidArgument(
            f"index: {index!r} is not one of 'flat', 'ivf_flat', 'ivf_sq8', 'ivf_pq'") from None


def as_ids(ids, field="ids") -> np.ndarray:
    """ids as a 1-D uint64 array; refuses negative or non-integer values."""
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise errors.InvalidArgument(f"{field}: must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.uint64)
    if arr.dtype == object:
        try:
            arr = np.array([int(x) for x in arr], dtype=np.uint64)
        except (TypeError, ValueError, OverflowError):
            raise errors.InvalidArgument(f"{field}: must be integers in [0, 2^64)") from None
    if arr.dtype.kind not in "iu":
        raise errors.InvalidArgument(f"{field}: must be integers, got {arr.dtype}")
    if arr.dtype.kind == "i" and arr.min() < 0:
        raise errors.InvalidArgument(f"{field}: must be non-negative")
    return arr.astype(np.uint64, copy=False)


def as_matrix(vectors, field="vectors") -> np.ndarray:
    """vectors as a C-contiguous little-endian float32 2-D array."""
    arr = np.asarray(vectors, dtype="<f4")
    if arr.ndim != 2:
        raise errors.InvalidArgument(f"{field}: must be two-dimensional, got shape {arr.shape}")
    return np.ascontiguousarray(arr)


# ---- wire encoding ------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field_bytes(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _varint(len(payload)) + payload


def _scalar_value(key, v) -> pb.Value:
    if isinstance(v, (bool, np.bool_)):
        return pb.Value(bool_value=bool(v))
    if isinstance(v, (int, np.integer)):
        return pb.Value(int_value=int(v))
    if isinstance(v, (float, np.floating)):
        return pb.Value(double_value=float(v))
    if isinstance(v, str):
        return pb.Value(string_value=v)
    raise errors.InvalidArgument(
        f"attributes[{key!r}]: {type(v).__name__} is not int, float, str, bool or a list of them")


def _attr_value(key, v) -> pb.Value:
    """A Python attribute as a Value: a scalar, or a list/tuple of scalars (several tags)."""
    if isinstance(v, (list, tuple)):
        return pb.Value(list_value=pb.ValueList(values=[_scalar_value(key, e) for e in v]))
    return _scalar_value(key, v)


def _attr_python(v: pb.Value) -> AttributeValue:
    kind = v.WhichOneof("kind")
    if kind == "list_value":
        return [_attr_python(e) for e in v.list_value.values]
    return getattr(v, kind) if kind else None


def encode_upsert(collection: str, ids: np.ndarray, vectors: np.ndarray,
                  attributes: Optional[List[dict]] = None) -> bytes:
    """The serialized UpsertRequest for rows ids[i] / vectors[i] (/ attributes[i])."""
    if attributes is not None:
        req = pb.UpsertRequest(collection=collection)
        for i, (pid, row) in enumerate(zip(ids.tolist(), vectors)):
            p = req.points.add(id=pid)
            p.vector[:] = row.tolist()
            for key, value in (attributes[i] or {}).items():
                p.attributes[str(key)].CopyFrom(_attr_value(key, value))
        return req.SerializeToString()
    vec_field = b"\x12" + _varint(4 * vectors.shape[1]) if vectors.shape[1] else b""
    raw = vectors.tobytes()
    step = 4 * vectors.shape[1]
    parts = [_field_bytes(0x0A, collection.encode())] if collection else []
    for i, pid in enumerate(ids.tolist()):
        point = (b"\x08" + _varint(pid) if pid else b"") + vec_field + raw[i * step:(i + 1) * step]
        parts.append(b"\x12" + _varint(len(point)))
        parts.append(point)
    return b"".join(parts)


def encode_search(collection: str, queries: np.ndarray, k: int, nprobe: int,
                  refine_factor: int, tag: int = 0, timeout_ms: int = 0,
                  filter: str = "") -> bytes:
    """The serialized SearchRequest (packed_results = true) for the rows of `queries`;
    `tag` and `timeout_ms` for SearchStream messages; `filter` (docs/filtering.md)."""
    nq, dim = queries.shape
    inner = (b"\x0a" + _varint(4 * dim)) if dim else b""
    prefix = b"\x12" + _varint(len(inner) + 4 * dim) + inner
    # Every query has the same prefix: lay [prefix | floats] rows out in one numpy buffer.
    rows = np.empty((nq, len(prefix) + 4 * dim), dtype=np.uint8)
    rows[:, :len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    rows[:, len(prefix):] = queries.view(np.uint8).reshape(nq, 4 * dim)
    head = _field_bytes(0x0A, collection.encode()) if collection else b""
    tail = b""
    for key, value in ((0x18, k), (0x20, nprobe), (0x28, refine_factor), (0x48, tag),
                       (0x50, timeout_ms)):
        if value:
            tail += bytes([key]) + _varint(int(value))
    if filter:
        tail += _field_bytes(0x5A, filter.encode())
    return head + rows.tobytes() + tail + b"\x40\x01"


def identity(b: bytes) -> bytes:
    return b


# ---- decoding -----------------------------------------------------------------------------

def info_from_proto(c: pb.CollectionInfo) -> CollectionInfo:
    return CollectionInfo(
        name=c.name, dim=c.dim, metric=METRIC_NAMES.get(c.metric, str(c.metric)),
        index=INDEX_NAMES.get(c.index.type, str(c.index.type)), nlist=c.index.nlist,
        pq_m=c.index.pq_m, pq_bits=c.index.pq_bits, default_nprobe=c.index.default_nprobe, num_vectors=c.num_vectors,
        num_indexed=c.num_indexed, num_segments=c.num_segments,
        index_state=STATE_NAMES.get(c.index_state, str(c.index_state)),
        disk_bytes=c.disk_bytes, build_phase=c.build_phase, build_percent=c.build_percent,
        error=c.error, attribute_memory_bytes=c.attribute_memory_bytes)


def point_from_proto(p: pb.Point, include_vectors: bool) -> Point:
    vector = np.array(p.vector, dtype=np.float32) if include_vectors else None
    attrs = {k: _attr_python(v) for k, v in p.attributes.items()}
    return Point(id=p.id, vector=vector, attributes=attrs)


def results_from_proto(resp: pb.SearchResponse) -> List[SearchResult]:
    out = []
    for r in resp.results:
        if r.hits and not r.ids:  # a server without packed_results: read the hits
            ids = np.fromiter((h.id for h in r.hits), dtype=np.uint64, count=len(r.hits))
            dist = np.fromiter((h.distance for h in r.hits), dtype=np.float32, count=len(r.hits))
        else:
            ids = np.array(r.ids, dtype=np.uint64)
            dist = np.array(r.distances, dtype=np.float32)
        s = r.stats
        stats = QueryStats(s.partitions_probed, s.partitions_cached, s.bytes_read,
                           s.vectors_scanned, s.queue_us, s.io_us, s.cpu_us, s.plan,
                           s.rows_matched, s.partitions_skipped, s.matching_rows_scanned)
        out.append(SearchResult(ids, dist, stats))
    return out
