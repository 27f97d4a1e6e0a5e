"""Channel set-up shared by Client and AsyncClient: TLS, API key, message sizes, retries."""
import dataclasses
import random
from typing import Optional, Union

import grpc

from . import errors

# shoald's default server.max_message_bytes; requests are split well below it.
MAX_MESSAGE_BYTES = 64 << 20
# Bulk calls that run for long: an UpsertStream and BuildIndex get this deadline (as the C++
# SDK's OpenUpsertStream), not the per-call `timeout`.
LONG_CALL_SECONDS = 3600.0


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """TLS settings for Client(tls=...), mapped onto grpc.ssl_channel_credentials.

    ca_file:   PEM roots that sign the server's certificate (None: the system's roots).
    cert_file, key_file: PEM client certificate and key, for servers that ask for mTLS.
    server_name: the name to check in the server's certificate when it differs from the
               address's host (grpc.ssl_target_name_override; for tests and IP addresses).
    `tls=True` is the same as TlsConfig(): system roots, no client certificate.
    """
    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    server_name: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        if (self.cert_file is None) != (self.key_file is None):
            raise errors.InvalidArgument("tls: cert_file and key_file go together")

        def read(path):
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file), private_key=read(self.key_file),
            certificate_chain=read(self.cert_file))


def tls_config(tls: Union[None, bool, TlsConfig]) -> Optional[TlsConfig]:
    if tls is None or tls is False:
        return None
    if tls is True:
        return TlsConfig()
    if isinstance(tls, TlsConfig):
        return tls
    raise TypeError("tls: expected None, True or shoal.TlsConfig")


def channel_args(tls: Optional[TlsConfig]):
    options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    if tls is not None and tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return options


def metadata(api_key: Optional[str]):
    return (("authorization", f"Bearer {api_key}"),) if api_key else None


class RetryPolicy:
    """UNAVAILABLE is retried up to `max_retries` times with jittered exponential backoff,
    for idempotent calls only (see Client's docstring for which)."""

    def __init__(self, max_retries=3, initial_backoff=0.1, max_backoff=2.0):
        self.max_retries = max_retries
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff

    def delays(self):
        """Sleep before each retry: half to all of the backoff, which doubles each time."""
        backoff = self.initial_backoff
        for _ in range(self.max_retries):
            yield random.uniform(backoff / 2, backoff)
            backoff = min(backoff * 2, self.max_backoff)


def is_retryable(e: grpc.RpcError) -> bool:
    return callable(getattr(e, "code", None)) and e.code() == grpc.StatusCode.UNAVAILABLE
