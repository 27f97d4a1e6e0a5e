"""Generates the gRPC stubs (shoal/v1, shoal/_health) before setuptools looks for the packages
listed in pyproject.toml, when they are not there yet (an install from client/python; the
copy in build/python already has them)."""
import os
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.path.exists(os.path.join(HERE, "shoal", "v1", "shoal_pb2_grpc.py")):
    sys.path.insert(0, HERE)
    import build_stubs

    build_stubs.generate(os.path.join(HERE, "shoal"))

setup()
