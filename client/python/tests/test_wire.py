"""The SDK's hand-made request bytes equal protobuf's own encoding, and argument checks."""
import numpy as np
import pytest

import shoal
from shoal import _wire
from shoal.v1 import shoal_pb2 as pb


@pytest.mark.parametrize("dim", [1, 3, 40])
def test_encode_upsert_matches_protobuf(dim):
    ids = np.array([0, 1, 127, 128, 300, 2**63, 2**64 - 1], dtype=np.uint64)
    x = np.random.default_rng(dim).standard_normal((len(ids), dim)).astype(np.float32)
    expect = pb.UpsertRequest(collection="coll")
    for i, row in zip(ids.tolist(), x):
        expect.points.add(id=i, vector=row.tolist())
    assert _wire.encode_upsert("coll", ids, x) == expect.SerializeToString()


def test_encode_upsert_with_attributes_round_trips():
    x = np.ones((2, 2), dtype=np.float32)
    wire = _wire.encode_upsert("c", np.array([5, 6], dtype=np.uint64), x,
                               [{"s": "a", "i": 3, "f": 0.5, "b": False}, None])
    req = pb.UpsertRequest.FromString(wire)
    assert [p.id for p in req.points] == [5, 6]
    a = req.points[0].attributes
    assert (a["s"].string_value, a["i"].int_value, a["f"].double_value, a["b"].bool_value) == \
        ("a", 3, 0.5, False)
    assert a["b"].WhichOneof("kind") == "bool_value"


def test_list_attributes_encode_as_value_lists_and_decode_back():
    x = np.ones((1, 2), dtype=np.float32)
    wire = _wire.encode_upsert("c", np.array([1], dtype=np.uint64), x,
                               [{"tags": ["a", 2, 0.5, True], "none": ()}])
    p = pb.UpsertRequest.FromString(wire).points[0]
    tags = p.attributes["tags"]
    assert tags.WhichOneof("kind") == "list_value"
    assert [v.WhichOneof("kind") for v in tags.list_value.values] == \
        ["string_value", "int_value", "double_value", "bool_value"]
    assert _wire._attr_python(tags) == ["a", 2, 0.5, True]
    assert _wire._attr_python(p.attributes["none"]) == []
    with pytest.raises(shoal.InvalidArgument):
        _wire.encode_upsert("c", np.array([1], dtype=np.uint64), x, [{"t": [["nested"]]}])


@pytest.mark.parametrize("k,nprobe,refine", [(10, 0, 0), (1, 16, 4), (10000, 300, 0)])
def test_encode_search_matches_protobuf(k, nprobe, refine):
    q = np.random.default_rng(k).standard_normal((5, 33)).astype(np.float32)
    expect = pb.SearchRequest(collection="fmnist", k=k, nprobe=nprobe, refine_factor=refine,
                              packed_results=True)
    for row in q:
        expect.queries.add(values=row.tolist())
    assert _wire.encode_search("fmnist", q, k, nprobe, refine) == expect.SerializeToString()


@pytest.mark.parametrize("tag,timeout_ms", [(0, 0), (1, 0), (2**40 + 3, 250)])
def test_encode_search_carries_the_stream_tag_and_timeout(tag, timeout_ms):
    q = np.ones((2, 4), dtype=np.float32)
    req = pb.SearchRequest.FromString(
        _wire.encode_search("c", q, 10, 4, 2, tag=tag, timeout_ms=timeout_ms))
    assert (req.tag, req.timeout_ms, req.k, req.nprobe, req.refine_factor) == \
        (tag, timeout_ms, 10, 4, 2)
    assert req.packed_results and len(req.queries) == 2


def test_results_decode_packed_arrays_and_fall_back_to_hits():
    resp = pb.SearchResponse()
    r = resp.results.add(ids=[3, 2**64 - 1], distances=[0.5, 1.5])
    r.stats.partitions_probed = 7
    old = resp.results.add()
    old.hits.add(id=9, distance=2.0)
    packed, from_hits = _wire.results_from_proto(resp)
    assert packed.ids.tolist() == [3, 2**64 - 1] and packed.distances.tolist() == [0.5, 1.5]
    assert packed.stats.partitions_probed == 7
    assert list(from_hits) == [shoal.Hit(9, 2.0)]


def test_ids_must_be_non_negative_integers():
    assert _wire.as_ids([1, 2]).dtype == np.uint64
    assert _wire.as_ids(7).tolist() == [7]
    assert _wire.as_ids([2**64 - 1]).tolist() == [2**64 - 1]
    for bad in ([-1], [1.5], [[1, 2]], ["a"]):
        with pytest.raises(shoal.InvalidArgument):
            _wire.as_ids(bad)


def test_unknown_index_and_metric_names_are_refused():
    with pytest.raises(shoal.InvalidArgument, match="index"):
        _wire.index_enum("hnsw")
    assert _wire.metric_enum("IP") == pb.METRIC_INNER_PRODUCT


def test_tls_config_needs_cert_and_key_together(tmp_path):
    with pytest.raises(shoal.InvalidArgument, match="cert_file and key_file"):
        shoal.TlsConfig(cert_file=str(tmp_path / "c.pem")).credentials()
    with pytest.raises(TypeError):
        shoal.Client("127.0.0.1:1", tls="yes")
