"""Shoal Python SDK: a client for the shoald vector search server.

    import shoal
    client = shoal.Client("localhost:7700")
    result = client.search("fmnist", query, k=10)   # result.ids, result.distances (numpy)

See Client (synchronous) and AsyncClient (asyncio, grpc.aio); errors are shoal.ShoalError
subclasses named after gRPC status codes (shoal.errors).
"""
from ._channel import TlsConfig
from ._progress import ProgressBar
from ._wire import CollectionInfo, HealthStatus, Hit, Point, QueryStats, SearchResult
from .aio import AsyncClient
from .client import Client
from .errors import *  # noqa: F401,F403 (the exception hierarchy)
from .errors import __all__ as _error_names

__version__ = "0.1.0"

__all__ = ["Client", "AsyncClient", "TlsConfig", "ProgressBar", "CollectionInfo",
           "HealthStatus", "Hit", "Point", "QueryStats", "SearchResult"] + list(_error_names)
