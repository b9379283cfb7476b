"""Checkpoints of training runs (every trainer's): the store (`store.py`: atomic pairs of an
`.eqx` file and its JSON, located by SHA-256), the trust rules (`trust.py`: which
checkpoint belongs to the run, given the settings that bind it, which best weights a `last`
checkpoint records; `last_record.py`: a checkpoint's JSON read as a typed `Record`, its
fields checked), and the run folder's lock (`lock.py`). The store imports neither a command
line nor a step builder."""

from ..atomic import write_atomic as write_atomic
from .last_record import Record as Record
from .last_record import check_last as check_last
from .lock import FolderInUse as FolderInUse
from .lock import RunLock as RunLock
from .lock import take_lock as take_lock
from .store import PREVIOUS as PREVIOUS
from .store import CheckpointError as CheckpointError
from .store import Pair as Pair
from .store import exists as exists
from .store import load as load
from .store import load_pair as load_pair
from .store import locate as locate
from .store import nonfinite_leaves as nonfinite_leaves
from .store import read_json as read_json
from .store import save as save
from .store import sha256 as sha256
from .store import to_host as to_host
from .trust import NotBound as NotBound
from .trust import NoTrustedBest as NoTrustedBest
from .trust import check_bound as check_bound
from .trust import recorded_best as recorded_best
from .trust import trusted_best as trusted_best

__all__ = [
    "CheckpointError",
    "FolderInUse",
    "Record",
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
