"""Checkpoints of LRA runs: the store (`_store.py`: atomic pairs of an `.eqx` file and its
JSON, located by SHA-256), the trust rules (`_trust.py`: which checkpoint belongs to the
run, which best weights a `last` checkpoint records; `_last_record.py`: its fields
checked), and the run folder's lock (`_lock.py`). The store imports neither the command
line nor the step builder."""

from ..._atomic import write_atomic as write_atomic
from ._last_record import check_last as check_last
from ._lock import FolderInUse as FolderInUse
from ._lock import RunLock as RunLock
from ._store import PREVIOUS as PREVIOUS
from ._store import CheckpointError as CheckpointError
from ._store import Pair as Pair
from ._store import exists as exists
from ._store import load as load
from ._store import load_pair as load_pair
from ._store import locate as locate
from ._store import nonfinite_leaves as nonfinite_leaves
from ._store import read_json as read_json
from ._store import save as save
from ._store import sha256 as sha256
from ._store import to_host as to_host
from ._trust import NotBound as NotBound
from ._trust import NoTrustedBest as NoTrustedBest
from ._trust import check_bound as check_bound
from ._trust import recorded_best as recorded_best
from ._trust import trusted_best as trusted_best

__all__ = [
    "CheckpointError",
    "FolderInUse",
    "Pair",
    "RunLock",
    "save",
    "load",
    "locate",
    "load_pair",
    "exists",
    "to_host",
    "write_atomic",
    "read_json",
    "sha256",
    "nonfinite_leaves",
    "PREVIOUS",
    "NotBound",
    "NoTrustedBest",
    "check_bound",
    "check_last",
    "recorded_best",
    "trusted_best",
]
