"""Every method of shoal.Client and shoal.AsyncClient against a real shoald (the `api`
fixture runs each test once per client)."""
import io

import numpy as np
import pytest

import shoal
from shoal import _ops

DIM = 8


def points(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.arange(n, dtype=np.uint64), rng.random((n, DIM), dtype=np.float32)


def test_create_collection_then_describe_reports_the_schema(api, name):
    api.create_collection(name, dim=DIM, metric="cosine", index="ivf_flat", nlist=4)
    info = api.describe(name)
    assert (info.name, info.dim, info.metric, info.index, info.nlist) == \
        (name, DIM, "cosine", "ivf_flat", 4)
    assert (info.num_vectors, info.index_state) == (0, "none")


def test_create_collection_passes_pq_m_for_ivf_pq(api, name):
    api.create_collection(name, dim=DIM, index="ivf_pq", pq_m=4)
    assert (api.describe(name).index, api.describe(name).pq_m) == ("ivf_pq", 4)


def test_create_collection_passes_pq_bits_for_ivf_pq(api, name):
    api.create_collection(name, dim=DIM, index="ivf_pq", pq_m=4, pq_bits=4)
    assert (api.describe(name).pq_m, api.describe(name).pq_bits) == (4, 4)


def test_create_collection_refuses_an_odd_pq_m_with_four_bits(api, name):
    with pytest.raises(shoal.InvalidArgument, match="pq_m"):
        api.create_collection(name, dim=DIM, index="ivf_pq", pq_m=1, pq_bits=4)


def test_create_collection_defaults_to_flat_l2(api, name):
    api.create_collection(name, dim=DIM)
    info = api.describe(name)
    assert (info.metric, info.index) == ("l2", "flat")


def test_create_collection_refuses_an_unknown_metric_before_sending(api, name):
    with pytest.raises(shoal.InvalidArgument, match="metric"):
        api.create_collection(name, dim=DIM, metric="hamming")
    with pytest.raises(shoal.NotFound):
        api.describe(name)


def test_create_collection_twice_raises_already_exists(api, name):
    api.create_collection(name, dim=DIM)
    with pytest.raises(shoal.AlreadyExists, match=name) as e:
        api.create_collection(name, dim=DIM)
    assert e.value.code.name == "ALREADY_EXISTS"


def test_create_collection_with_a_bad_dim_raises_invalid_argument_naming_the_field(api, name):
    with pytest.raises(shoal.InvalidArgument, match="dim"):
        api.create_collection(name, dim=0)


def test_drop_collection_removes_it(api, name):
    api.create_collection(name, dim=DIM)
    api.drop_collection(name)
    with pytest.raises(shoal.NotFound):
        api.describe(name)
    with pytest.raises(shoal.NotFound):
        api.drop_collection(name)


def test_list_collections_returns_infos_sorted_by_name(api, name):
    api.create_collection(name + "_b", dim=DIM)
    api.create_collection(name + "_a", dim=4)
    listed = [c for c in api.list_collections() if c.name.startswith(name)]
    assert [(c.name, c.dim) for c in listed] == [(name + "_a", 4), (name + "_b", DIM)]


def test_upsert_accepts_numpy_and_lists_and_get_returns_vectors_and_attributes(api, name):
    api.create_collection(name, dim=DIM)
    ids, x = points(3)
    assert api.upsert(name, ids, x) == 3
    attrs = [{"color": "red", "n": 7}, {"ok": True, "w": 0.5}]
    assert api.upsert(name, [10, 11], x[:2].tolist(), attributes=attrs) == 2
    got = api.get(name, [11, 1, 10, 999], include_vectors=True)
    assert [p.id for p in got] == [11, 1, 10]  # found ids only, in request order
    np.testing.assert_array_equal(got[1].vector, x[1])
    assert got[1].vector.dtype == np.float32
    assert got[0].attributes == {"ok": True, "w": 0.5}
    assert got[2].attributes == {"color": "red", "n": 7}


def test_get_without_include_vectors_returns_no_vectors(api, name):
    api.create_collection(name, dim=DIM)
    api.upsert(name, *points(2))
    got = api.get(name, [0, 1])
    assert [(p.id, p.vector) for p in got] == [(0, None), (1, None)]


def test_upsert_streams_large_inputs_in_batches_and_reports_progress(api, name):
    api.create_collection(name, dim=DIM)
    ids, x = points(1000)
    seen = []
    assert api.upsert(name, ids, x, batch_size=300, progress=lambda d, t: seen.append((d, t))) \
        == 1000
    assert seen == [(300, 1000), (600, 1000), (900, 1000), (1000, 1000)]
    assert api.describe(name).num_vectors == 1000
    np.testing.assert_array_equal(api.get(name, [999], include_vectors=True)[0].vector, x[999])


def test_upsert_reports_progress_once_for_a_single_message(api, name):
    api.create_collection(name, dim=DIM)
    seen = []
    api.upsert(name, *points(5), progress=lambda d, t: seen.append((d, t)))
    assert seen == [(5, 5)]


def test_upsert_progress_true_off_a_terminal_prints_nothing(api, name, capsys):
    api.create_collection(name, dim=DIM)
    assert api.upsert(name, *points(50), batch_size=10, progress=True) == 50
    assert capsys.readouterr().err == ""


def test_upsert_re_raises_an_exception_from_the_progress_callback(api, name):
    api.create_collection(name, dim=DIM)

    class Stop(Exception):
        pass

    def progress(done, total):
        raise Stop()
    with pytest.raises(Stop):
        api.upsert(name, *points(100), batch_size=10, progress=progress)


def test_upsert_refuses_mismatched_rows_and_negative_ids_before_sending(api, name):
    api.create_collection(name, dim=DIM)
    ids, x = points(3)
    with pytest.raises(shoal.InvalidArgument, match="rows"):
        api.upsert(name, ids, x[:2])
    with pytest.raises(shoal.InvalidArgument, match="non-negative"):
        api.upsert(name, [-1, 2, 3], x)
    with pytest.raises(shoal.InvalidArgument, match="attributes"):
        api.upsert(name, ids, x, attributes=[{}])


def test_upsert_of_a_wrong_dimension_raises_the_servers_invalid_argument(api, name):
    api.create_collection(name, dim=DIM)
    with pytest.raises(shoal.InvalidArgument, match=r"points\[0\]\.vector"):
        api.upsert(name, [1], np.zeros((1, DIM + 1)))


def test_delete_returns_how_many_ids_existed(api, name):
    api.create_collection(name, dim=DIM)
    api.upsert(name, *points(10))
    assert api.delete(name, [1, 2, 3, 12345]) == 3
    assert [p.id for p in api.get(name, [1, 4])] == [4]


def test_search_of_a_matrix_returns_one_result_per_row_as_numpy_arrays(api, name):
    api.create_collection(name, dim=DIM)
    ids, x = points(200)
    api.upsert(name, ids, x)
    results = api.search(name, x[:5], k=3)
    assert isinstance(results, list) and len(results) == 5
    for i, r in enumerate(results):
        assert r.ids.dtype == np.uint64 and r.distances.dtype == np.float32
        assert r.ids.shape == (3,) and r.ids[0] == i and r.distances[0] == 0
        assert np.all(np.diff(r.distances) >= 0)  # l2: nearest first
        assert r.stats.vectors_scanned == 200


def test_search_of_one_vector_returns_one_result_that_iterates_as_hits(api, name):
    api.create_collection(name, dim=DIM)
    ids, x = points(50)
    api.upsert(name, ids, x)
    r = api.search(name, x[7].tolist(), k=4)
    hits = list(r)
    assert len(r) == 4 and len(hits) == 4
    assert (hits[0].id, hits[0].distance) == (7, 0.0)
    assert [h.id for h in hits] == r.ids.tolist()
    assert r[1] == hits[1]
    # Exact distances match numpy's.
    expect = ((x - x[7]) ** 2).sum(axis=1)
    np.testing.assert_allclose([h.distance for h in hits], np.sort(expect)[:4], rtol=1e-5)


def test_search_splits_a_large_query_set_into_requests_in_order(api, name, monkeypatch):
    monkeypatch.setattr(_ops, "QUERIES_PER_REQUEST", 7)
    api.create_collection(name, dim=DIM)
    ids, x = points(100)
    api.upsert(name, ids, x)
    results = api.search(name, x[:30], k=1)
    assert [int(r.ids[0]) for r in results] == list(range(30))


def test_search_many_streams_the_queries_and_answers_in_query_order(api, name):
    api.create_collection(name, dim=DIM)
    ids, x = points(300)
    api.upsert(name, ids, x)
    for batch, in_flight in ((1, 16), (7, 2)):
        results = api.search_many(name, x[:40], k=3, batch=batch, in_flight=in_flight)
        assert len(results) == 40
        assert [int(r.ids[0]) for r in results] == list(range(40))
        one = api.search(name, x[11], k=3)
        assert results[11].ids.tolist() == one.ids.tolist()
        np.testing.assert_array_equal(results[11].distances, one.distances)


def test_search_many_raises_the_first_failed_messages_error(api, name):
    api.create_collection(name, dim=DIM)
    api.upsert(name, *points(20))
    with pytest.raises(shoal.InvalidArgument, match="k: "):
        api.search_many(name, np.zeros((5, DIM)), k=0)
    with pytest.raises(shoal.NotFound, match="collection"):
        api.search_many("no-such-collection", np.zeros((3, DIM)))


def test_search_with_nprobe_and_refine_factor_on_an_ivf_sq8_index(api, name):
    api.create_collection(name, dim=DIM, index="ivf_sq8", nlist=4)
    ids, x = points(500)
    api.upsert(name, ids, x)
    api.build_index(name)
    r = api.search(name, x[3], k=5, nprobe=4, refine_factor=4)
    assert r.ids[0] == 3
    assert r.stats.partitions_probed == 4


def test_search_with_k_zero_raises_invalid_argument_naming_k(api, name):
    api.create_collection(name, dim=DIM)
    api.upsert(name, *points(5))
    with pytest.raises(shoal.InvalidArgument, match="k: "):
        api.search(name, np.zeros(DIM), k=0)


def test_search_of_a_missing_collection_raises_not_found(api, name):
    with pytest.raises(shoal.NotFound, match="collection"):
        api.search(name, np.zeros(DIM))


def test_build_index_waits_and_returns_the_servers_message(api, name):
    api.create_collection(name, dim=DIM, index="ivf_flat", nlist=4)
    api.upsert(name, *points(400))
    message = api.build_index(name)
    assert "IVF_FLAT" in message
    info = api.describe(name)
    assert (info.index_state, info.num_indexed) == ("ready", 400)


def test_build_index_without_waiting_returns_a_future_of_the_message(api, name):
    api.create_collection(name, dim=DIM, index="ivf_flat", nlist=4)
    api.upsert(name, *points(400))
    future = api.build_index(name, wait=False)
    assert api.describe(name).index_state in ("none", "building", "ready")
    assert "IVF_FLAT" in api.finish(future)
    assert api.describe(name).index_state == "ready"


def test_flush_returns_the_servers_message(api, name):
    api.create_collection(name, dim=DIM)
    api.upsert(name, *points(10))
    assert isinstance(api.flush(name), str)
    assert api.describe(name).num_vectors == 10


def test_health_of_the_server_and_of_collections(api, name):
    assert api.health() == shoal.HealthStatus.SERVING == "SERVING"
    assert api.health(name) == shoal.HealthStatus.SERVICE_UNKNOWN
    api.create_collection(name, dim=DIM)
    assert api.health(name) == shoal.HealthStatus.SERVING
    api.drop_collection(name)
    assert api.health(name) == shoal.HealthStatus.NOT_SERVING


def test_api_key_is_sent_as_bearer_metadata(make_client, strict_shoald, name):
    with pytest.raises(shoal.Unauthenticated, match="authorization"):
        make_client(strict_shoald.address).list_collections()
    with pytest.raises(shoal.Unauthenticated, match="invalid API key"):
        make_client(strict_shoald.address, api_key="wrong").list_collections()
    c = make_client(strict_shoald.address, api_key="s3cret")
    c.create_collection(name, dim=DIM)
    assert name in [i.name for i in c.list_collections()]


def test_a_request_over_the_servers_limits_raises_resource_exhausted(make_client,
                                                                     strict_shoald, name):
    c = make_client(strict_shoald.address, api_key="s3cret")
    c.create_collection(name, dim=DIM)
    c.upsert(name, *points(5))
    with pytest.raises(shoal.ResourceExhausted, match="limits.max_request_bytes"):
        c.search(name, np.zeros(DIM))


def test_no_server_raises_unavailable_after_retries(make_client):
    import socket
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = make_client(f"127.0.0.1:{port}", timeout=5)
    with pytest.raises(shoal.Unavailable):
        c.list_collections()


def test_progress_bar_draws_rate_and_completion():
    out = io.StringIO()
    bar = shoal.ProgressBar("load", stream=out)
    bar(50, 100)
    bar(100, 100)
    text = out.getvalue()
    assert "load [" in text and "100%" in text and "100/100" in text and text.endswith("\n")


def test_a_broken_collection_is_described_and_its_data_calls_raise_data_loss(
        make_client, workdir, name):
    import os
    from conftest import Shoald
    data = os.path.join(workdir, "broken_" + name)
    server = Shoald(data)
    try:
        c = make_client(server.address)
        c.create_collection("victim", dim=DIM)
        c.upsert("victim", *points(10))
        server.stop()
        # Flip a byte in the middle of the manifest CURRENT names.
        coll = os.path.join(data, "collections", "victim")
        with open(os.path.join(coll, "CURRENT")) as f:
            manifest = os.path.join(coll, f.read().strip())
        with open(manifest, "r+b") as f:
            size = f.seek(0, 2)
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0xFF]))
        server = Shoald(data)
        c = make_client(server.address)
        info = c.describe("victim")
        assert info.index_state == "broken" and manifest in info.error
        with pytest.raises(shoal.DataLoss, match="victim"):
            c.search("victim", np.zeros(DIM))
        assert c.health("victim") == shoal.HealthStatus.NOT_SERVING
        c.drop_collection("victim")
        assert c.list_collections() == []
    finally:
        server.stop()


def test_filtered_search_search_many_and_count(api, name):
    api.create_collection(name, dim=DIM)
    ids, x = points(40)
    attrs = [{"tenant": int(i % 4), "tags": ["even" if i % 2 == 0 else "odd", "all"]}
             for i in range(40)]
    api.upsert(name, ids, x, attributes=attrs)
    assert api.get(name, [3])[0].attributes == {"tenant": 3, "tags": ["odd", "all"]}
    assert api.count(name) == 40
    assert api.count(name, filter="tenant = 1") == 10
    assert api.count(name, filter='tags = "even" and tenant != 0') == 10
    r = api.search(name, x[5], k=50, filter="tenant = 1")
    assert sorted(r.ids.tolist()) == [i for i in range(40) if i % 4 == 1]  # min(k, 10) = 10
    assert r.stats.plan == "exact_matches" and r.stats.rows_matched == 10  # few matches: scored exactly
    many = api.search_many(name, x[:3], k=3, filter='tags = "odd"')
    assert all(len(m.ids) == 3 and all(i % 2 == 1 for i in m.ids.tolist()) for m in many)
    with pytest.raises(shoal.InvalidArgument, match="at byte 9"):
        api.search(name, x[0], k=1, filter="tenant = = 1")
    with pytest.raises(shoal.InvalidArgument):
        api.count(name, filter="(")
