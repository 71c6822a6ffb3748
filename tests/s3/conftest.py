"""A real S3 API server on 127.0.0.1 for the whole session (moto's server mode), a
fault-injecting proxy in front of it (properties/s3_proxy.py), and per-test buckets.

The server is started once per session on a free port and stopped at the end;
the standard AWS environment variables point at it, so child processes (the
kill campaign, the aggregation rounds) reach it the way a real job reaches its
endpoint.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator

import pytest

from properties.s3_proxy import FaultProxy

boto3 = pytest.importorskip("boto3", reason="tests/s3 need boto3 (the dev extra installs it)")
moto_server = pytest.importorskip(
    "moto.server", reason="tests/s3 need moto[server] (the dev extra installs it)"
)

_ENV = {
    "AWS_ACCESS_KEY_ID": "zephon-ref-test",
    "AWS_SECRET_ACCESS_KEY": "zephon-ref-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
_DROP_ENV = (
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)
_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Start moto's S3 server on a free loopback port; point the AWS env vars at it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in (*_ENV, *_DROP_ENV, "AWS_ENDPOINT_URL")}
    os.environ.update(_ENV, AWS_ENDPOINT_URL=url)
    for k in _DROP_ENV:
        os.environ.pop(k, None)
    try:
        yield url
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture()
def bucket(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A fresh, empty bucket for one test."""
    name = f"zr-{next(_buckets)}-{os.getpid()}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture()
def proxy(s3_endpoint: str) -> Iterator[FaultProxy]:
    p = FaultProxy(s3_endpoint)
    try:
        yield p
    finally:
        p.close()
