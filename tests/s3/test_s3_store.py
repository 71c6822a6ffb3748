"""The durable store over a real S3 API server on loopback: layout, conditional
publication, the probe, typed faults, multipart, the CLI, the pipeline surface."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from properties.ckpt_campaigns import crash_state
from properties.s3_proxy import Fault, FaultProxy
from zephon_ref.checkpoint import cli, s3, store
from zephon_ref.checkpoint.schema import manifest_file_name
from zephon_ref.errors import ConfigError, ConfigTypeError
from zephon_ref.storage.errors import PublishConflict, StorageError

boto3 = pytest.importorskip("boto3")

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_s3_child.py")


def keys(bucket: str, prefix: str = "") -> list[str]:
    out = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in out.get("Contents", ()))


def test_the_server_honours_if_none_match(bucket: str) -> None:
    c = boto3.client("s3")
    c.put_object(Bucket=bucket, Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(c.exceptions.ClientError) as info:
        c.put_object(Bucket=bucket, Key="k", Body=b"2", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"1"


def test_save_load_gc_round_trip_with_the_local_layout(bucket: str, tmp_path: Path) -> None:
    url = f"s3://{bucket}/jobs/run-7/ckpt"
    states = [crash_state(s) for s in (1, 2, 3)]
    assert [store.save(s, url) for s in states] == [1, 2, 3]
    assert store.list_generations(url) == [1, 2, 3]
    assert store.load(url) == states[2] and store.load(url, 1) == states[0]
    local = tmp_path / "ck"
    for s in states:
        store.save(s, local)
    # The same names (derived from identity) under the prefix as in a directory.
    assert [k.removeprefix("jobs/run-7/ckpt/") for k in keys(bucket, "jobs/")] == sorted(os.listdir(local))
    report = store.gc(url, keep=1)
    assert report.kept == (3,) and report.removed_generations == (1, 2)
    assert store.load(url) == states[2] and store.list_generations(url) == [3]
    assert len(keys(bucket, "jobs/")) == report.files_after == len(store.read_manifest(url, 3).shards) + 1


def test_a_published_key_is_never_replaced(bucket: str) -> None:
    url = f"s3://{bucket}/p"
    store.save(crash_state(1), url)
    manifest = f"p/{manifest_file_name(1)}"
    before = boto3.client("s3").get_object(Bucket=bucket, Key=manifest)["Body"].read()
    with pytest.raises(PublishConflict):
        store.publish_bytes(f"s3://{bucket}/{manifest}", b"other bytes")
    assert boto3.client("s3").get_object(Bucket=bucket, Key=manifest)["Body"].read() == before
    assert store.load(url) == crash_state(1)


def test_bad_urls_are_refused_with_a_typed_error(bucket: str) -> None:
    for bad in ("s3://", "s3://A_B/x", "s3://ab", f"s3://{bucket}//x", f"s3://{bucket}/a/../b", "gs://b/x"):
        with pytest.raises(ConfigError):
            store.list_generations(bad)
        with pytest.raises(ConfigError):
            store.save(crash_state(1), bad)
    assert keys(bucket) == []


def test_endpoint_ignoring_conditional_writes_is_refused_before_any_data(
    bucket: str, proxy: FaultProxy
) -> None:
    proxy.strip_conditions = True
    st = s3.S3Storage(bucket, endpoint_url=proxy.url)
    with pytest.raises(s3.ConditionalWritesUnsupported) as info:
        store.save(crash_state(1), f"s3://{bucket}/ck", storage=st)
    assert info.value.reason == "conditional-writes-ignored" and proxy.url in str(info.value)
    assert isinstance(info.value, StorageError)
    assert keys(bucket) == []  # no checkpoint data, and the probe key removed
    assert proxy.seen["PUT"] == 2
    # The same refusal from the aggregation backend, before the round writes.
    from zephon_ref.coordination.objectstore import ObjectStoreBackend

    with pytest.raises(s3.ConditionalWritesUnsupported):
        ObjectStoreBackend(f"s3://{bucket}/agg", storage=st)
    # The explicit opt-out (tests only) skips the probe, and then nothing protects a key.
    unsafe = s3.S3Storage(bucket, endpoint_url=proxy.url, verify_conditional_writes=False)
    assert store.save(crash_state(1), f"s3://{bucket}/ck", storage=unsafe) == 1
    # Through the honest endpoint the probe passes and conditional writes hold.
    proxy.strip_conditions = False
    honest = s3.S3Storage(bucket, endpoint_url=proxy.url)
    with pytest.raises(PublishConflict):
        store.publish_bytes(f"s3://{bucket}/ck/{manifest_file_name(1)}", b"x", storage=honest)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (Fault("throttle", method="PUT"), "throttled"),
        (Fault("server", method="PUT"), "server-error"),
        (Fault("denied", method="PUT"), "access-denied"),
        (Fault("reset", method="PUT"), "connection"),
        (Fault("throttle", method="GET"), "throttled"),
        (Fault("reset", method="GET"), "connection"),
    ],
    ids=lambda v: v.action + "-" + str(v.method) if isinstance(v, Fault) else v,
)
def test_store_faults_are_typed_and_leave_the_previous_generation(
    bucket: str, proxy: FaultProxy, fault: Fault, reason: str
) -> None:
    url = f"s3://{bucket}/ck"
    st = s3.S3Storage(bucket, endpoint_url=proxy.url, max_attempts=3)
    assert store.save(crash_state(1), url, storage=st) == 1
    proxy.faults.append(fault)
    with pytest.raises(StorageError) as info:
        if fault.method == "GET":
            store.load(url, storage=st)
        else:
            store.save(crash_state(2), url, storage=st)
    assert info.value.reason == reason, info.value
    assert proxy.url in str(info.value)
    # Transient faults are retried within the budget (3 attempts), then refused;
    # access denied is not retried.
    assert proxy.injected[fault.action] == (1 if fault.action == "denied" else 3)
    proxy.faults.clear()
    assert store.latest_complete_generation(url, storage=st) == 1
    assert store.load(url, storage=st) == crash_state(1)
    assert store.save(crash_state(3), url, storage=st) == 2  # torn leftovers never share a number


def test_throttling_within_the_retry_budget_succeeds(bucket: str, proxy: FaultProxy) -> None:
    st = s3.S3Storage(bucket, endpoint_url=proxy.url, max_attempts=4)
    url = f"s3://{bucket}/ck"
    store.save(crash_state(1), url, storage=st)
    proxy.faults.append(Fault("throttle", method="PUT", count=3))
    assert store.save(crash_state(2), url, storage=st) == 2
    assert proxy.injected["throttle"] == 3
    assert store.load(url) == crash_state(2)


def test_missing_bucket_is_typed(s3_endpoint: str) -> None:
    url = "s3://zr-no-such-bucket/ck"
    for call in (
        lambda: store.save(crash_state(1), url),
        lambda: store.load(url),
        lambda: store.gc(url, keep=1),
    ):
        with pytest.raises(StorageError) as info:
            call()
        assert info.value.reason == "missing-bucket" and "zr-no-such-bucket" in str(info.value)


def test_multipart_publication_keeps_the_condition(bucket: str) -> None:
    st = s3.S3Storage(bucket, multipart_threshold=1, part_size=5 * 1024 * 1024)
    big = os.urandom(11 * 1024 * 1024)
    st.publish_object(Path("/big/blob"), big, replace=False)
    with pytest.raises(FileExistsError):
        st.publish_object(Path("/big/blob"), b"small", replace=False)
    assert st.read(Path("/big/blob")) == big
    assert boto3.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    # Every shard and the manifest of a save as multipart uploads.
    url = f"s3://{bucket}/mp"
    assert store.save(crash_state(4), url, storage=st) == 1
    assert store.load(url) == crash_state(4)


def test_cli_accepts_s3_urls(bucket: str) -> None:
    url = f"s3://{bucket}/cli"
    for s in (1, 2, 3):
        store.save(crash_state(s), url)

    def run(*argv: str) -> tuple[int, str]:
        import argparse
        import contextlib

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(argv))
        del argparse
        return rc, out.getvalue() + err.getvalue()

    rc, text = run("inspect", url)
    assert rc == cli.EXIT_OK and "generation 3" in text
    rc, text = run("verify", url)
    assert rc == cli.EXIT_OK and "3/3 generations verified" in text
    rc, text = run("gc", url, "--keep", "2")
    assert rc == cli.EXIT_OK and "kept generations [2, 3]" in text
    assert store.list_generations(url) == [2, 3]
    boto3.client("s3").put_object(Bucket=bucket, Key=f"cli/{manifest_file_name(3)}", Body=b"{}")
    rc, text = run("verify", url)
    assert rc == cli.EXIT_CORRUPT and "1/2 generations verified" in text
    assert run("verify", "s3://zr-no-such-bucket/x")[0] == cli.EXIT_STORAGE
    assert run("inspect", "s3://Bad_Bucket/x")[0] == cli.EXIT_USAGE
    assert run("inspect", f"s3://{bucket}/empty")[0] == cli.EXIT_MISSING


def _pipeline() -> Any:
    sys.path.insert(0, str(CHILD.parent))
    from _s3_child import resume_pipeline

    return resume_pipeline()


def test_pipeline_save_and_restore_in_a_fresh_process(bucket: str) -> None:
    from properties.pipelines import item_view

    url = f"s3://{bucket}/pipe"
    p = _pipeline()
    it = iter(p)
    for _ in range(5):
        next(it)
    it.close()
    assert p.save_checkpoint(url) == 1
    straight = iter(_pipeline())  # the uninterrupted run: its items 6..11 are the continuation
    want = [item_view(next(straight)) for _ in range(11)][5:]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(CHILD), url, "resume", "6", "0"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["generation"] == 1
    assert got["items"] == json.loads(json.dumps(want, default=repr))
    # The restore floor is per normalised URL: an older generation is a reset cursor.
    q = _pipeline()
    assert q.load_checkpoint(url + "/") == 1
    q2 = _pipeline()
    it = iter(q2)
    next(it)
    it.close()
    assert q2.save_checkpoint(url) == 2
    assert q.load_checkpoint(url) == 2
    from zephon_ref.storage.errors import CheckpointRefused

    with pytest.raises(CheckpointRefused):
        q.load_checkpoint(url, 1)


def test_pipeline_refuses_bad_directory_arguments(s3_endpoint: str) -> None:
    p = _pipeline()
    for bad in ("s3://", "s3://x/y", "gs://bucket/x", "s3://bucket//x"):
        with pytest.raises(ConfigError):
            p.save_checkpoint(bad)
        with pytest.raises(ConfigError):
            p.load_checkpoint(bad)
    for bad in (None, 3, b"s3://bucket/x", ""):
        with pytest.raises(ConfigTypeError):
            p.save_checkpoint(bad)


@pytest.mark.parametrize("target", ["manifest-", ".universal.", ".lane-"])
def test_a_conditional_write_whose_answer_was_lost_is_recognised_as_ours(
    bucket: str, proxy: FaultProxy, target: str
) -> None:
    """The server stores the object, the connection dies before the answer, botocore
    retries and gets 412: the store reads the object back and sees its own bytes."""
    st = s3.S3Storage(bucket, endpoint_url=proxy.url, max_attempts=3)
    url = f"s3://{bucket}/ck"
    store.save(crash_state(1), url, storage=st)
    proxy.faults.append(Fault("drop", method="PUT", count=1, path_contains=target))
    assert store.save(crash_state(2), url, storage=st) == 2
    assert proxy.injected["drop"] == 1
    assert store.load(url) == crash_state(2)
    assert all(isinstance(r, store.Manifest) for _, r in store.iter_verify(url))
    # Nothing was removed or left over: exactly the two generations' objects.
    names = [k.removeprefix("ck/") for k in keys(bucket, "ck/")]
    want = [e.file_name(g) for g in (1, 2) for e in store.read_manifest(url, g).shards]
    assert names == sorted(want + [manifest_file_name(1), manifest_file_name(2)])
