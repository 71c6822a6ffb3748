"""Object storage: the :class:`~zephon_ref.storage.Storage` interface over the S3 API.

Theory of operation
-------------------
An ``s3://bucket/prefix`` URL names a *directory* of the durable store: the
objects whose keys start with ``prefix/``.  :class:`S3Storage` serves one
bucket; a store path is mapped to a key by dropping its leading ``/``
(``Path("/run7/ckpt") / "manifest-g1.json"`` is the key
``run7/ckpt/manifest-g1.json``), see :func:`location`.

Object stores have no temp files, links or directories, so :class:`S3Storage`
offers one publish-level operation, :meth:`S3Storage.publish_object`, that
:func:`zephon_ref.storage.publish` calls instead of the
POSIX sequence when a storage has it:

* never replace (checkpoints): ``PutObject`` with ``If-None-Match: *``; the
  server answers 412 when the key exists, which becomes ``FileExistsError``
  (the publish routine turns it into :class:`~zephon_ref.storage.errors.PublishConflict`).
  A value over ``multipart_threshold`` bytes goes as a multipart upload whose
  ``CompleteMultipartUpload`` carries the same condition, so a published key
  is never replaced whatever its size.  When botocore retried a conditional
  write (the first attempt may have landed and its answer been lost) and the
  retry got 412, the object is read back: our own bytes mean our write
  landed, anything else is a conflict.
* replace (the aggregation backend's ``put``): a plain ``PutObject``; S3
  objects appear whole or not at all.

``make_dirs`` and ``sync_dir`` do no I/O (a key is durable when ``PutObject``
answers), ``seal`` does nothing (published keys are protected by the
condition, not by permissions), ``list`` is ``ListObjectsV2`` with delimiter
``/`` (names of objects and of sub-prefixes, sorted), ``read`` is
``GetObject`` (``None`` on 404), ``remove`` is ``DeleteObject`` (S3 does not
say whether the key existed, so it answers True).  ``create``/``link``/
``rename`` raise ``OSError(EOPNOTSUPP)``: nothing here uses them.

**The probe.**  Before the first write through an instance (``make_dirs`` or
``publish_object``), :meth:`S3Storage.ensure_conditional_writes` puts one
probe key twice with ``If-None-Match: *`` and deletes it: the second put must
answer 412, else the endpoint would silently replace published checkpoints
and :class:`ConditionalWritesUnsupported` names the endpoint.  The answer is
remembered per (endpoint, bucket) for the life of the process.
``verify_conditional_writes=False`` skips it (tests only).

**Errors.**  Every failure becomes a :class:`~zephon_ref.storage.errors.StorageError`
whose ``reason`` is one of ``throttled`` (SlowDown/503 and friends, after
botocore's ``standard`` retry mode spent its attempts and retry quota: the
budget), ``connection`` (reset, refused, timed out), ``server-error`` (other
5xx), ``access-denied`` (403), ``missing-bucket`` (NoSuchBucket), or
``s3-error``; the message names the endpoint, the operation and the key.

Configuration comes from the standard AWS sources through boto3's session:
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION`` /
``AWS_DEFAULT_REGION``, ``AWS_PROFILE`` and the shared config files.

What may not live here: checkpoint layout (store.py), clocks (botocore's
own retry back-off aside), fault injection.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zephon_ref.errors import ConfigError, expected
from zephon_ref.storage.errors import StorageError

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "MULTIPART_THRESHOLD",
    "PART_SIZE",
    "ConditionalWritesUnsupported",
    "S3Location",
    "S3Storage",
    "is_s3_url",
    "location",
    "storage_for",
]

MULTIPART_THRESHOLD = 16 * 1024 * 1024
PART_SIZE = 8 * 1024 * 1024  # S3's minimum part is 5 MiB (the last part excepted)
DEFAULT_MAX_ATTEMPTS = 5  # botocore "standard" mode: 1 try + 4 retries, within its retry quota
PROBE_DIR = ".zephon-ref-probe"

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_THROTTLE = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "RequestThrottled",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
    }
)
_DENIED = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled", "ExpiredToken"}
)


class ConditionalWritesUnsupported(StorageError):
    """The endpoint replaced an existing key despite ``If-None-Match: *`` (see the module docstring)."""


def is_s3_url(value: object) -> bool:
    """True for a str that starts with ``s3://`` (any case)."""
    return isinstance(value, str) and value[:5].lower() == "s3://"


@dataclass(frozen=True, slots=True)
class S3Location:
    """Where an ``s3://`` URL points: the bucket, the key prefix (no slashes at
    either end, may be empty) and the store path that maps to it."""

    bucket: str
    prefix: str

    @property
    def root(self) -> Path:
        return Path("/" + self.prefix)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def location(url: str) -> S3Location:
    """Parse ``s3://bucket[/prefix]``; :class:`ConfigError` for anything else."""
    want = (
        "s3://<bucket>[/<prefix>] with a 3-63 char bucket of [a-z0-9.-] and a prefix without empty segments"
    )
    if not is_s3_url(url):
        raise ConfigError(expected("object-store URL", want, url))
    bucket, _, prefix = url[5:].partition("/")
    prefix = prefix.rstrip("/")
    parts = prefix.split("/") if prefix else []
    if (
        not _BUCKET.fullmatch(bucket)
        or ".." in bucket
        or any(p in ("", ".", "..") for p in parts)
        or any(ord(ch) < 32 for ch in prefix)
    ):
        raise ConfigError(expected("object-store URL", want, url))
    return S3Location(bucket, prefix)


def _key(path: Path) -> str:
    return os.fspath(path).lstrip("/")


class _Writer:
    def write(self, data: bytes) -> None:
        raise OSError(_errno.EOPNOTSUPP, "object storage has no open files; use publish_object")

    def sync(self) -> None:
        return None

    def close(self) -> None:
        return None


_PROBED: set[tuple[str, str]] = set()
_PROBED_LOCK = threading.Lock()
_STORAGES: dict[tuple[str, str], S3Storage] = {}  # forward reference; filled by storage_for


def _new_client(max_attempts: int, endpoint_url: str | None) -> Any:
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "total_max_attempts": max_attempts})
    return boto3.session.Session().client("s3", config=config, endpoint_url=endpoint_url)


class S3Storage:
    """One bucket behind the Storage interface plus ``publish_object`` (module docstring).

    ``client`` is a ready boto3 S3 client; otherwise one is made from the
    environment (``endpoint_url`` overrides ``AWS_ENDPOINT_URL``) with botocore's
    ``standard`` retry mode and ``max_attempts`` attempts per request.
    """

    def __init__(
        self,
        bucket: str,
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        verify_conditional_writes: bool = True,
        multipart_threshold: int = MULTIPART_THRESHOLD,
        part_size: int = PART_SIZE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
            raise ConfigError(expected("S3 bucket", "3-63 chars of [a-z0-9.-]", bucket))
        for name, value, lo in (
            ("multipart_threshold", multipart_threshold, 1),
            ("part_size", part_size, 1),
            ("max_attempts", max_attempts, 1),
        ):
            if type(value) is not int or value < lo:
                raise ConfigError(expected(name, f"an int >= {lo}", value))
        self.bucket = bucket
        self.client: Any = _new_client(max_attempts, endpoint_url) if client is None else client
        self.endpoint: str = str(getattr(getattr(self.client, "meta", None), "endpoint_url", "?"))
        self.verify_conditional_writes = verify_conditional_writes
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size

    # ------------------------------------------------------------ errors

    def error(self, exc: BaseException, op: str, key: str) -> StorageError:
        """The typed form of a botocore failure of ``op`` on ``key``."""
        if isinstance(exc, StorageError):
            return exc
        from botocore.exceptions import ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        where = f"S3 {op} of s3://{self.bucket}/{key} at {self.endpoint}"
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code in _THROTTLE or status == 429:
                reason, eno = "throttled", _errno.EAGAIN
            elif code == "NoSuchBucket":
                reason, eno = "missing-bucket", _errno.ENOENT
            elif code in _DENIED or status == 403:
                reason, eno = "access-denied", _errno.EACCES
            elif status >= 500:
                reason, eno = "server-error", _errno.EIO
            else:
                reason, eno = "s3-error", _errno.EIO
            got = f"[{reason}] HTTP {status} {code}: {err.get('Message', '')}"
        elif isinstance(exc, (BotoConnectionError, HTTPClientError, ConnectionError)):
            reason, eno = "connection", _errno.ECONNRESET
            got = f"[connection] {type(exc).__name__}: {exc}"
        else:
            reason, eno = "s3-error", _errno.EIO
            got = f"[s3-error] {type(exc).__name__}: {exc}"
        return StorageError(
            expected(where, "success", got),
            reason=reason,
            errno=eno,
            filename=f"s3://{self.bucket}/{key}",
            op=op,
        )

    @staticmethod
    def _status(exc: BaseException) -> tuple[int, str, int]:
        response = getattr(exc, "response", None)
        if not isinstance(response, dict):
            return 0, "", 0
        meta = response.get("ResponseMetadata", {})
        return (
            int(meta.get("HTTPStatusCode", 0) or 0),
            str(response.get("Error", {}).get("Code", "")),
            int(meta.get("RetryAttempts", 0) or 0),
        )

    # ------------------------------------------------------------ probe

    def ensure_conditional_writes(self) -> None:
        """Refuse an endpoint that ignores ``If-None-Match: *`` (see the module docstring)."""
        if not self.verify_conditional_writes:
            return
        ident = (self.endpoint, self.bucket)
        with _PROBED_LOCK:
            if ident in _PROBED:
                return
        key = f"{PROBE_DIR}/{secrets.token_hex(8)}"  # clock-ok: probe-key uniqueness only
        first = self._conditional_put(key, b"probe-1", op="probe")
        try:
            second = self._conditional_put(key, b"probe-2", op="probe")
        finally:
            with contextlib.suppress(Exception):  # best effort; a leftover probe key is harmless
                self.client.delete_object(Bucket=self.bucket, Key=key)
        if not first or second:
            raise ConditionalWritesUnsupported(
                expected(
                    f"conditional writes at S3 endpoint {self.endpoint} (bucket {self.bucket})",
                    "the second PutObject with If-None-Match: * of one key to answer 412",
                    "it replaced the key (the endpoint ignores conditional writes; a published checkpoint "
                    "could be overwritten)",
                ),
                reason="conditional-writes-ignored",
                errno=_errno.EOPNOTSUPP,
                filename=f"s3://{self.bucket}/{key}",
                op="probe",
            )
        with _PROBED_LOCK:
            _PROBED.add(ident)

    def _conditional_put(self, key: str, data: bytes, *, op: str) -> bool:
        """True when created, False on 412; StorageError for anything else."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except Exception as exc:
            status, code, _ = self._status(exc)
            if status == 412 or code == "PreconditionFailed":
                return False
            raise self.error(exc, op, key) from exc
        return True

    # ------------------------------------------------------------ publish

    def publish_object(self, path: Path, data: bytes, *, replace: bool) -> None:
        """Publish ``data`` at ``path`` whole; never replace unless ``replace``
        (``FileExistsError`` when the key exists); StorageError otherwise."""
        key = _key(path)
        self.ensure_conditional_writes()
        if replace:
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
            except Exception as exc:
                raise self.error(exc, "put", key) from exc
            return
        try:
            if len(data) > self.multipart_threshold:
                self._multipart(key, data)
            else:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except Exception as exc:
            status, code, retried = self._status(exc)
            if status == 412 or code == "PreconditionFailed" or code == "ConditionalRequestConflict":
                if retried and code != "ConditionalRequestConflict" and self.read(path) == data:
                    return  # an earlier attempt of this very call landed; its answer was lost
                raise FileExistsError(_errno.EEXIST, f"s3://{self.bucket}/{key} exists") from exc
            raise self.error(
                exc, "multipart" if len(data) > self.multipart_threshold else "put", key
            ) from exc

    def _multipart(self, key: str, data: bytes) -> None:
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        try:
            parts = []
            view = memoryview(data)
            for number, start in enumerate(range(0, len(data), self.part_size), start=1):
                body = bytes(view[start : start + self.part_size])
                etag = self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=body
                )["ETag"]
                parts.append({"ETag": etag, "PartNumber": number})
            self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload,
                MultipartUpload={"Parts": parts},
                IfNoneMatch="*",
            )
        except BaseException:
            with contextlib.suppress(Exception):  # best effort; a bucket lifecycle rule reaps the rest
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            raise

    # ------------------------------------------------------------ the Storage primitives

    def create(self, path: Path) -> _Writer:
        raise OSError(_errno.EOPNOTSUPP, "object storage: use publish_object", os.fspath(path))

    def link(self, src: Path, dst: Path) -> None:
        raise OSError(_errno.EOPNOTSUPP, "object storage: use publish_object", os.fspath(dst))

    def rename(self, src: Path, dst: Path) -> None:
        raise OSError(_errno.EOPNOTSUPP, "object storage: use publish_object", os.fspath(dst))

    def seal(self, path: Path) -> None:
        return None

    def sync_dir(self, directory: Path) -> None:
        return None

    def make_dirs(self, directory: Path) -> bool:
        # No directories in a bucket; this is where a writer first meets the store.
        self.ensure_conditional_writes()
        return False

    def remove(self, path: Path) -> bool:
        key = _key(path)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            raise self.error(exc, "delete", key) from exc
        return True

    def read(self, path: Path) -> bytes | None:
        key = _key(path)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                data: bytes = body.read()
            finally:
                body.close()
        except Exception as exc:
            status, code, _ = self._status(exc)
            if code in ("NoSuchKey", "404") or (status == 404 and code != "NoSuchBucket"):
                return None
            raise self.error(exc, "get", key) from exc
        return data

    def list(self, directory: Path) -> list[str]:
        prefix = _key(directory)
        prefix = f"{prefix}/" if prefix else ""
        names: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "Delimiter": "/"}
        try:
            while True:
                page = self.client.list_objects_v2(**kwargs)
                names.extend(o["Key"][len(prefix) :] for o in page.get("Contents", ()))
                names.extend(p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", ()))
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated") or not token:
                    break
                kwargs["ContinuationToken"] = token
        except Exception as exc:
            raise self.error(exc, "list", prefix) from exc
        return sorted(n for n in names if n)


def storage_for(bucket: str, *, verify_conditional_writes: bool = True) -> S3Storage:
    """The process's shared :class:`S3Storage` for ``bucket`` at the environment's endpoint."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    ident = (f"{os.getpid()}:{endpoint}", bucket)  # boto3 clients are not shared across a fork
    with _PROBED_LOCK:
        found = _STORAGES.get(ident)
    if found is not None and found.verify_conditional_writes == verify_conditional_writes:
        return found
    made = S3Storage(bucket, verify_conditional_writes=verify_conditional_writes)
    with _PROBED_LOCK:
        _STORAGES[ident] = made
    return made
