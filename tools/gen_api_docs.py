#!/usr/bin/env python3
"""Writes docs/api.md from proto/shoal/v1/shoal.proto and its comments.

    /usr/bin/python3 tools/gen_api_docs.py > docs/api.md

Messages, fields, enums and RPCs with their comments come from the proto (protoc
--include_source_info); the status codes each RPC answers are kept in STATUS below, next to
the server code they describe (server/validation.cc, server/shoal_service.cc, storage/). The
Python SDK test client/python/tests/test_api_docs.py fails when docs/api.md is not what this
script prints, so the reference cannot drift from the proto.
"""
import os
import subprocess
import sys
import tempfile

from google.protobuf import descriptor_pb2

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PROTO = "shoal/v1/shoal.proto"

# Codes every Shoal RPC can answer besides OK.
COMMON = [
    ("UNAUTHENTICATED", "the server has API keys (`server.api_key`, `server.api_key_file`) "
     "and the call's `authorization: Bearer <key>` metadata is missing or none of them; the "
     "message says only which (the health service needs no key)"),
    ("UNAVAILABLE", "the server is shutting down or cannot be reached; safe to retry for "
     "idempotent calls (see below)"),
    ("DEADLINE_EXCEEDED / CANCELLED", "the client's deadline passed or it cancelled the call"),
    ("RESOURCE_EXHAUSTED", "a message larger than `server.max_message_bytes` (64 MiB by "
     "default), in either direction"),
    ("INTERNAL", "an unexpected failure inside the server (a bug: the log says more)"),
]

_NAME = "`INVALID_ARGUMENT` for a name that does not match `[A-Za-z0-9_-]{1,64}`"
_COLL = ("`NOT_FOUND` for a collection that does not exist; `DATA_LOSS` for a broken one "
         "(INDEX_STATE_BROKEN)")
_WAL = ("`RESOURCE_EXHAUSTED` when too many writes wait for the WAL (`wal.max_pending_bytes`; "
        "retry later) or the disk is full; `UNAVAILABLE` after a WAL write failed (the "
        "collection is read-only until restart)")
STATUS = {
    "CreateCollection": [
        _NAME + ", a dim outside 1..65536, METRIC_UNSPECIFIED, an unknown index type, nlist or "
        "default_nprobe over 65536, pq_m that is 0 or does not divide dim (IVF_PQ) or is set "
        "for another index type, pq_bits other than 0, 4 or 8 or set for another index type, an "
        "odd pq_m with pq_bits 4",
        "`ALREADY_EXISTS` when the name is taken (a broken collection of that name included)",
        "`UNAVAILABLE` while a collection of the same name is still being dropped"],
    "DropCollection": [_NAME, "`NOT_FOUND` for a collection that does not exist"],
    "ListCollections": ["only the common codes; broken collections are listed with "
                        "INDEX_STATE_BROKEN and `error`"],
    "DescribeCollection": [_NAME, "`NOT_FOUND` for a collection that does not exist; a broken "
                           "one is answered OK with INDEX_STATE_BROKEN and `error`"],
    "Upsert": [
        "`INVALID_ARGUMENT` for an empty `points`, a vector whose length is not the "
        "collection's dim or that holds a NaN or infinity or whose squared norm is above "
        "FLT_MAX / 8 (about 4.25e37: distances to it would overflow float), an attribute key "
        "that is empty or over 256 bytes, an attribute Value with nothing set, or a list Value "
        "that nests a list, holds an unset Value or more than 1024 values; the message names "
        "the field, "
        "e.g. `points[3].vector: has 12 values, the collection's dim is 784`",
        _COLL, _WAL],
    "UpsertStream": [
        "as Upsert, for each message; the error names the message (`message 7: points[0]...`) "
        "and ends the stream; messages acknowledged before it are durable",
        "`INVALID_ARGUMENT` when a message names another collection than the first one",
        _COLL, _WAL],
    "Delete": ["`INVALID_ARGUMENT` for an empty `ids` or more than 100000 ids", _COLL, _WAL],
    "Get": [
        "`INVALID_ARGUMENT` for an empty `ids` or more than 100000 ids", _COLL,
        "`RESOURCE_EXHAUSTED` when the answer would be over `server.max_message_bytes`, the "
        "request's memory estimate over `limits.max_request_bytes`, every request in "
        "flight together over `limits.max_inflight_request_bytes`, or the connection already "
        "has `server.max_inflight_per_peer` Searches and Gets running (retry with backoff)"],
    "Search": [
        "`INVALID_ARGUMENT` for k outside 1..10000, nprobe over 65536, no queries or more than "
        "10000, a query whose length is not dim or that holds a NaN or infinity or whose "
        "squared norm is above FLT_MAX / 8, k * refine_factor over `limits.max_candidates_per_query`, "
        "or a filter that does not parse or is over 4096 bytes or 32 levels deep (the message "
        "names the byte and what was expected, docs/filtering.md)",
        _COLL,
        "`RESOURCE_EXHAUSTED` past `search.max_inflight` searches running or queued, past "
        "`server.max_inflight_per_peer` Searches and Gets of this connection, or over "
        "`limits.max_request_bytes`, `limits.max_inflight_request_bytes` or "
        "`server.max_message_bytes` (the message says which; retry with backoff or send "
        "smaller requests)",
        "`DEADLINE_EXCEEDED` / `CANCELLED` are honoured mid-search: the server stops the "
        "query's work and returns its resources"],
    "SearchStream": [
        "each message as Search, answered in that message's `error` (the stream goes on); a "
        "message that does not parse is answered `INVALID_ARGUMENT` with tag 0",
        "the stream's own status: `UNAUTHENTICATED` without a valid API key, `UNAVAILABLE` "
        "while the server shuts down, `CANCELLED` when the client cancels (every running "
        "search of the stream stops); otherwise OK once every message is answered"],
    "Count": [
        "`INVALID_ARGUMENT` for a bad collection name or a filter that does not parse (as "
        "Search)", _COLL,
        "`RESOURCE_EXHAUSTED` past `server.max_inflight_per_peer` calls of this connection"],
    "BuildIndex": [
        "`INVALID_ARGUMENT` for a bad collection name", _COLL,
        "`FAILED_PRECONDITION` when the collection was dropped or the server is shutting down "
        "during the build",
        "`RESOURCE_EXHAUSTED` when the disk is full; `UNAVAILABLE` after another I/O error "
        "writing the segment"],
    "Flush": [
        "`INVALID_ARGUMENT` for a bad collection name", _COLL,
        "`FAILED_PRECONDITION` when the collection was dropped or the server is shutting down",
        "`RESOURCE_EXHAUSTED` when the disk is full; `UNAVAILABLE` after another I/O error"],
}
# Retried after UNAVAILABLE by the SDKs: the effect of sending these twice is that of once.
IDEMPOTENT = {"ListCollections", "DescribeCollection", "Upsert", "UpsertStream", "Delete", "Get",
              "Search", "Count", "Flush"}
PYTHON = {
    "CreateCollection": "create_collection(name, dim, metric=\"l2\", index=\"flat\", nlist=0, "
                        "pq_m=0, pq_bits=0)",
    "DropCollection": "drop_collection(name)",
    "ListCollections": "list_collections()",
    "DescribeCollection": "describe(name)",
    "Upsert": "upsert(name, ids, vectors, attributes=None, batch_size=None, progress=None)",
    "UpsertStream": "upsert(...) with more than batch_size points",
    "Delete": "delete(name, ids)",
    "Get": "get(name, ids, include_vectors=False)",
    "Search": "search(name, queries, k=10, nprobe=None, refine_factor=None, filter=None)",
    "Count": "count(name, filter=None)",
    "SearchStream": "search_many(name, queries, k=10, nprobe=None, refine_factor=None, batch=1, "
                    "in_flight=16, filter=None)",
    "BuildIndex": "build_index(name, wait=True)",
    "Flush": "flush(name)",
}

SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 8: "bool", 9: "string",
           12: "bytes", 13: "uint32", 17: "sint32", 18: "sint64"}


def load_descriptor():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "api.pb")
        subprocess.run(["protoc", f"--proto_path={os.path.join(ROOT, 'proto')}",
                        "--include_source_info", f"--descriptor_set_out={out}", PROTO],
                       check=True)
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return fds.file[0]


def file_header():
    """The proto's opening comment block (protoc keeps only its first paragraph)."""
    lines = []
    with open(os.path.join(ROOT, "proto", PROTO)) as f:
        for line in f:
            if not line.startswith("//"):
                break
            lines.append(line[3:].rstrip() if line.startswith("// ") else line[2:].rstrip())
    return "\n".join(lines).strip()


def clean(comment):
    lines = [line[1:] if line.startswith(" ") else line for line in comment.strip("\n").split("\n")]
    return "\n".join(lines).strip()


class Comments:
    def __init__(self, fd):
        self.by_path = {tuple(loc.path): loc for loc in fd.source_code_info.location}

    def get(self, *path, inline=False):
        loc = self.by_path.get(tuple(path))
        if loc is None:
            return ""
        text = " ".join(clean(c) for c in (loc.leading_comments, loc.trailing_comments) if c)
        return " ".join(text.split()) if inline else text


def type_name(field, messages_with_maps):
    if field.type_name:
        name = field.type_name.split(".")[-1]
        entry = messages_with_maps.get(field.type_name)
        if entry is not None:
            k, v = entry
            return f"map<{k}, {v}>"
        label = "repeated " if field.label == 3 else ""
        return f"{label}[{name}](#{name.lower()})" if not name.endswith("Entry") else name
    label = "repeated " if field.label == 3 else ""
    return label + SCALARS.get(field.type, str(field.type))


def escape(text):
    return text.replace("|", "\\|")


def render(fd):
    c = Comments(fd)
    out = []
    w = out.append
    w("# Shoal API reference (`shoal.v1`)\n")
    w("<!-- Generated by tools/gen_api_docs.py from proto/shoal/v1/shoal.proto; do not edit. "
      "Regenerate: /usr/bin/python3 tools/gen_api_docs.py > docs/api.md -->\n")
    w("shoald serves the gRPC service `shoal.v1.Shoal` (default `127.0.0.1:7700`) and the "
      "standard health service `grpc.health.v1.Health`. This page lists every RPC, message, "
      "field and enum of [proto/shoal/v1/shoal.proto](../proto/shoal/v1/shoal.proto) with "
      "the proto's own comments, and the status codes each RPC answers. The Python SDK's "
      "view of the same API is at the end.\n")
    header = file_header()
    if header:
        w("## Conventions\n")
        w("From the proto's header:\n")
        w("```\n" + header + "\n```\n")
    w("## Status codes\n")
    w("Errors carry a message that names the field or limit at fault. Every RPC may answer:\n")
    w("| code | when |\n| --- | --- |")
    for code, why in COMMON:
        w(f"| `{code}` | {why} |")
    w("")
    w("Idempotent RPCs (retried after `UNAVAILABLE` by the SDKs): "
      + ", ".join(f"`{m}`" for m in sorted(IDEMPOTENT)) + ". `CreateCollection`, "
      "`DropCollection` and `BuildIndex` are not: a retry after a lost answer would fail "
      "(`ALREADY_EXISTS`, `NOT_FOUND`) or build again.\n")

    maps = {}
    for m in fd.message_type:
        for nested in m.nested_type:
            if nested.options.map_entry:
                k, v = nested.field
                maps[f".{fd.package}.{m.name}.{nested.name}"] = (
                    type_name(k, {}), type_name(v, {}))

    for si, service in enumerate(fd.service):
        w(f"## Service `{fd.package}.{service.name}`\n")
        w("| RPC | request | response | Python SDK |\n| --- | --- | --- | --- |")
        for method in service.method:
            req = ("stream " if method.client_streaming else "") + method.input_type.split(".")[-1]
            resp = ("stream " if method.server_streaming else "") + method.output_type.split(".")[-1]
            w(f"| [{method.name}](#{method.name.lower()}) | {req} | {resp} | "
              f"`{PYTHON.get(method.name, '')}` |")
        w("")
        for mi, method in enumerate(service.method):
            req = method.input_type.split(".")[-1]
            resp = method.output_type.split(".")[-1]
            stream = "stream " if method.client_streaming else ""
            out_stream = "stream " if method.server_streaming else ""
            w(f"### {method.name}\n")
            w(f"`rpc {method.name}({stream}{req}) returns ({out_stream}{resp})`"
              f" — request [{req}](#{req.lower()}), response [{resp}](#{resp.lower()}).\n")
            doc = c.get(6, si, 2, mi)
            if doc:
                w(doc + "\n")
            w("Status codes besides the common ones" +
              (" (idempotent: retried after UNAVAILABLE):" if method.name in IDEMPOTENT
               else " (not idempotent: never retried):"))
            w("")
            for line in STATUS.get(method.name, []):
                w(f"- {line}")
            w("")
    w("## Service `grpc.health.v1.Health`\n")
    w("`rpc Check(HealthCheckRequest) returns (HealthCheckResponse)`, the standard protocol "
      "([proto/grpc/health/v1/health.proto](../proto/grpc/health/v1/health.proto)), served "
      "by gRPC's built-in health service:\n")
    w("- `service = \"\"`: the whole server; SERVING once it accepts requests, NOT_SERVING "
      "while it shuts down.")
    w("- `service = \"shoal.v1.Shoal/<collection>\"`: one collection; SERVING once it is open "
      "(the demo collection `fmnist` only after its data is loaded), NOT_SERVING after it is "
      "dropped or when it is broken; `NOT_FOUND` (SERVICE_UNKNOWN to `shoalctl health` and "
      "the Python SDK) for a name the server has never served.\n")

    w("## Messages\n")
    for mi, m in enumerate(fd.message_type):
        w(f"### {m.name}\n")
        doc = c.get(4, mi)
        if doc:
            w(doc + "\n")
        if not m.field:
            w("No fields.\n")
            continue
        w("| field | type | number | description |\n| --- | --- | --- | --- |")
        for fi, f in enumerate(m.field):
            desc = c.get(4, mi, 2, fi, inline=True)
            if f.HasField("oneof_index") and not f.proto3_optional:
                desc = (f"oneof `{m.oneof_decl[f.oneof_index].name}`. " + desc).strip()
            w(f"| `{f.name}` | {type_name(f, maps)} | {f.number} | {escape(desc)} |")
        w("")

    w("## Enums\n")
    for ei, e in enumerate(fd.enum_type):
        w(f"### {e.name}\n")
        doc = c.get(5, ei)
        if doc:
            w(doc + "\n")
        w("| value | number | description |\n| --- | --- | --- |")
        for vi, v in enumerate(e.value):
            w(f"| `{v.name}` | {v.number} | {escape(c.get(5, ei, 2, vi, inline=True))} |")
        w("")
    w(PYTHON_SECTION)
    return "\n".join(out).rstrip() + "\n"


PYTHON_SECTION = """## Python SDK (`shoal`)

Built by `make python` into `build/python` (client/python/README.md). `shoal.Client(address,
api_key=None, timeout=30.0, tls=None)`; `shoal.AsyncClient` has the same methods as
coroutines (grpc.aio). Each method is the RPC in the table above:

- Arguments: `ids` are non-negative integers (numpy array or list); `vectors` / `queries` are
  numpy arrays or lists, converted to float32. `metric` is `"l2"`, `"ip"` or `"cosine"`;
  `index` is `"flat"`, `"ivf_flat"`, `"ivf_sq8"` or `"ivf_pq"`.
- `upsert` sends up to `batch_size` points per message (default: about 2 MiB); more go as
  several messages over one `UpsertStream`. `progress` is None, True (a bar on a terminal) or
  a callable `progress(done, total)`. Returns the number of points upserted.
- `search` of a 1-D vector returns one `SearchResult`, of a 2-D array a list of them, one per
  row. It asks for `packed_results`, so `result.ids` (uint64) and `result.distances`
  (float32) are numpy arrays made without a per-hit Python object; iterating a result yields
  `Hit(id, distance)`; `result.stats` is the QueryStats. Large query sets are split into
  several requests, four in flight.
- `describe` / `list_collections` return `CollectionInfo` (metric, index and index_state as
  lower-case names); `get` returns `Point(id, vector, attributes)`; `delete` the number
  deleted; `build_index` and `flush` the server's message. shoald answers BuildIndex when the
  build is done: `build_index(name, wait=False)` returns at once with a
  `concurrent.futures.Future` (an `asyncio.Task` from AsyncClient) while `describe()` shows
  `build_phase` and `build_percent`.
- `health(collection=None)` is the health Check above: `shoal.HealthStatus.SERVING`,
  `NOT_SERVING` or `SERVICE_UNKNOWN` (a str enum).
- `tls=True` uses the system's roots, `tls=shoal.TlsConfig(ca_file=..., cert_file=...,
  key_file=..., server_name=...)` a private CA and a client certificate
  (grpc.ssl_channel_credentials), for a shoald with `server.tls_cert` (and
  `server.tls_client_ca`: mutual TLS). A handshake that fails raises `Unavailable`.
- Deadlines: `timeout` seconds per call; an upsert stream, build_index and flush get an hour.

Errors are raised as subclasses of `shoal.ShoalError` with `.code` (a `grpc.StatusCode`) and
`.message` (the server's): `Cancelled`, `Unknown`, `InvalidArgument`, `DeadlineExceeded`,
`NotFound`, `AlreadyExists`, `PermissionDenied`, `ResourceExhausted`, `FailedPrecondition`,
`Aborted`, `OutOfRange`, `Unimplemented`, `Internal`, `Unavailable`, `DataLoss`,
`Unauthenticated`. `UNAVAILABLE` is retried up to `client.max_retries` (3) times with
jittered exponential backoff from `client.initial_backoff` (0.1 s) for the idempotent RPCs
only; `create_collection`, `drop_collection` and `build_index` are sent once.
"""

if __name__ == "__main__":
    sys.stdout.write(render(load_descriptor()))
