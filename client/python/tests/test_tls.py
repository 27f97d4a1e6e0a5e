"""Client(tls=...) against a real shoald serving TLS and mutual TLS (issue 17), with a
throw-away CA made by deploy/make-secrets.sh (openssl) in a temporary directory: the CA's
client is served, a client trusting another CA or speaking plaintext is refused, and mutual
TLS needs a client certificate from the CA. Also the API key over TLS."""
import os
import shutil
import subprocess

import pytest

import shoal
from conftest import REPO, Shoald

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def make_pki(directory):
    subprocess.run([os.path.join(REPO, "deploy", "make-secrets.sh"), str(directory)],
                   check=True, capture_output=True)
    return {name: str(directory / f"{name}.pem") for name in ("ca", "server", "client")} | {
        f"{name}_key": str(directory / f"{name}.key") for name in ("server", "client")}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("other"))


@pytest.fixture(scope="module")
def tls_shoald(pki, workdir):
    server = Shoald(os.path.join(workdir, "tls"),
                    ["--tls-cert", pki["server"], "--tls-key", pki["server_key"],
                     "--api-key", "s3cret"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mtls_shoald(pki, workdir):
    server = Shoald(os.path.join(workdir, "mtls"),
                    ["--tls-cert", pki["server"], "--tls-key", pki["server_key"],
                     "--tls-client-ca", pki["ca"]])
    yield server
    server.stop()


def test_tls_with_the_servers_ca_is_served_by_ip_and_by_name(make_client, tls_shoald, pki):
    tls = shoal.TlsConfig(ca_file=pki["ca"])
    c = make_client(tls_shoald.address, tls=tls, api_key="s3cret", timeout=20)
    assert c.list_collections() == []
    c = make_client(f"localhost:{tls_shoald.port}", tls=tls, api_key="s3cret", timeout=20)
    assert c.list_collections() == []


def test_api_key_is_still_required_over_tls(make_client, tls_shoald, pki):
    c = make_client(tls_shoald.address, tls=shoal.TlsConfig(ca_file=pki["ca"]), timeout=20)
    with pytest.raises(shoal.Unauthenticated):
        c.list_collections()


def test_plaintext_client_is_refused_on_a_tls_port(make_client, tls_shoald):
    c = make_client(tls_shoald.address, api_key="s3cret", timeout=20)
    c.max_retries = 0
    with pytest.raises(shoal.Unavailable):
        c.list_collections()


def test_client_trusting_another_ca_refuses_the_server(make_client, tls_shoald, other_pki):
    c = make_client(tls_shoald.address, tls=shoal.TlsConfig(ca_file=other_pki["ca"]),
                    api_key="s3cret", timeout=20)
    c.max_retries = 0
    with pytest.raises(shoal.Unavailable):
        c.list_collections()


def test_mutual_tls_refuses_a_client_without_a_certificate(make_client, mtls_shoald, pki):
    c = make_client(mtls_shoald.address, tls=shoal.TlsConfig(ca_file=pki["ca"]), timeout=20)
    c.max_retries = 0
    with pytest.raises(shoal.Unavailable):
        c.list_collections()


def test_mutual_tls_refuses_a_certificate_from_another_ca(make_client, mtls_shoald, pki,
                                                          other_pki):
    tls = shoal.TlsConfig(ca_file=pki["ca"], cert_file=other_pki["client"],
                          key_file=other_pki["client_key"])
    c = make_client(mtls_shoald.address, tls=tls, timeout=20)
    c.max_retries = 0
    with pytest.raises(shoal.Unavailable):
        c.list_collections()


def test_mutual_tls_serves_a_client_certificate_from_its_ca(make_client, mtls_shoald, pki):
    tls = shoal.TlsConfig(ca_file=pki["ca"], cert_file=pki["client"], key_file=pki["client_key"])
    c = make_client(mtls_shoald.address, tls=tls, timeout=20)
    assert c.list_collections() == []
