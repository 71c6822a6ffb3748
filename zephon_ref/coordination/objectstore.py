"""The object-store aggregation backend now lives in :mod:`zephon_ref.coordination.backends`
(the directory backend over an S3 storage, plus back-off); this path re-exports it."""

from zephon_ref.coordination.backends import (
    CAP_S,
    GROWTH,
    START_S,
    TIMEOUT_FLOOR_S,
    Backoff,
    ObjectStoreBackend,
)

__all__ = ["CAP_S", "GROWTH", "START_S", "TIMEOUT_FLOOR_S", "Backoff", "ObjectStoreBackend"]
