"""Client(tls=...) speaks TLS with the CA and client certificate it is given: against an
in-process grpc.server that demands a client certificate (shoald's own TLS is issue 17)."""
import concurrent.futures
import shutil
import subprocess

import grpc
import pytest

import shoal
from shoal.v1 import shoal_pb2

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def make_cert(directory, name):
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return key, cert


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    server_key, server_cert = make_cert(d, "shoal.test")
    client_key, client_cert = make_cert(d, "client.test")
    handler = grpc.method_handlers_generic_handler("shoal.v1.Shoal", {
        "ListCollections": grpc.unary_unary_rpc_method_handler(
            lambda req, ctx: shoal_pb2.ListCollectionsResponse(
                collections=[shoal_pb2.CollectionInfo(name="over_tls", dim=3)]),
            response_serializer=shoal_pb2.ListCollectionsResponse.SerializeToString)})
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    creds = grpc.ssl_server_credentials(
        [(server_key.read_bytes(), server_cert.read_bytes())],
        root_certificates=client_cert.read_bytes(), require_client_auth=True)
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    yield {"address": f"127.0.0.1:{port}", "ca": str(server_cert), "cert": str(client_cert),
           "key": str(client_key), "other_ca": str(make_cert(d, "other.test")[1])}
    server.stop(None)


def test_tls_with_the_servers_ca_and_a_client_certificate_connects(make_client, tls_server):
    tls = shoal.TlsConfig(ca_file=tls_server["ca"], cert_file=tls_server["cert"],
                          key_file=tls_server["key"], server_name="shoal.test")
    c = make_client(tls_server["address"], tls=tls, timeout=10)
    assert [i.name for i in c.list_collections()] == ["over_tls"]


def test_tls_refuses_a_server_signed_by_another_ca(make_client, tls_server):
    tls = shoal.TlsConfig(ca_file=tls_server["other_ca"], cert_file=tls_server["cert"],
                          key_file=tls_server["key"], server_name="shoal.test")
    c = make_client(tls_server["address"], tls=tls, timeout=10)
    with pytest.raises(shoal.Unavailable):
        c.list_collections()


def test_tls_without_a_client_certificate_is_refused_by_a_server_that_wants_one(
        make_client, tls_server):
    tls = shoal.TlsConfig(ca_file=tls_server["ca"], server_name="shoal.test")
    c = make_client(tls_server["address"], tls=tls, timeout=10)
    with pytest.raises(shoal.Unavailable):
        c.list_collections()


def test_plaintext_client_cannot_talk_to_a_tls_server(make_client, tls_server):
    with pytest.raises(shoal.Unavailable):
        make_client(tls_server["address"], timeout=10).list_collections()
