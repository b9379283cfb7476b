"""What every trainer and command of `experiments/` shares, under public names: a guarantee
won once (a checkpoint that survives a crash, a signal that saves, an error in one line)
holds in every command that uses it.

- `checkpoint`: the checkpoint store (atomic `.eqx` + JSON pairs located by SHA-256), the
  trust rules (which checkpoint belongs to a run, given the settings that bind it), a
  checkpoint's JSON read as a typed `Record`, and the run folder's lock;
- `records`: a JSON file beside a command's outputs read as a typed record, each field
  checked (a malformed one refused in one line naming the file and the field);
- `resume`: the run's saved settings, the newest complete checkpoint, loaded, verified
  and refused if it is another run's, the line that says where the run goes on; a
  checkpoint written so that a second signal waits for it;
- `divergence`: a non-finite loss stops the run with one message;
- `signals`: SIGINT/TERM/HUP save and exit 130, `--save-signals` (USR1, USR2, XCPU) save
  and exit 0; `timing`: steps per second, `--time-limit`, the age of the process;
- `metrics`: the JSON-lines metrics log and its learning curve;
- `errors`: `UsageError` (status 2), `RunError` (status 1), `ConfigError`; a `main` that
  prints a failure's one line and returns its status (`exit_status`);
- `env`: the process environment set and checked before JAX starts its backend;
- `parallel`, `multiprocess`, `watchdog`: devices, meshes and batch sharding, processes
  that agree or fail together, and peers that die or never connect;
- `atomic`: files written whole or not at all; `flags`: argparse types and output paths;
  `cli`: the trainers' flags of an invocation (`--out`, `--resume`, `--stop-at`...), a
  flag for each setting of a settings record; `settings`: that record's fields;
- `progress`: a run's progress bar and the lines said above it; `lazy`: a module's names
  imported when first used (as here);
- `outputs`: whose files a folder holds (a command's record of its outputs): what a new
  run refuses, what `--overwrite` removes; `snapshot`: a consistent read of files a live
  trainer replaces.

`runs` imports neither trainer (`experiments.lra`, `experiments.lm`). Importing it does
not import JAX: the names below are loaded on first use (a command's `--help` stays fast).
"""

from typing import TYPE_CHECKING

from . import lazy as _lazy

if TYPE_CHECKING:
    from . import atomic as atomic
    from . import checkpoint as checkpoint
    from . import cli as cli
    from . import divergence as divergence
    from . import env as env
    from . import errors as errors
    from . import flags as flags
    from . import lazy as lazy
    from . import metrics as metrics
    from . import multiprocess as multiprocess
    from . import outputs as outputs
    from . import parallel as parallel
    from . import progress as progress
    from . import records as records
    from . import resume as resume
    from . import settings as settings
    from . import signals as signals
    from . import snapshot as snapshot
    from . import timing as timing
    from . import watchdog as watchdog
    from .atomic import write_atomic as write_atomic
    from .checkpoint import CheckpointError as CheckpointError
    from .checkpoint import RunLock as RunLock
    from .divergence import check_losses as check_losses
    from .divergence import diverged as diverged
    from .errors import ConfigError as ConfigError
    from .errors import RunError as RunError
    from .errors import UsageError as UsageError
    from .flags import flag as flag
    from .flags import number as number
    from .metrics import MetricsLog as MetricsLog
    from .metrics import read_records as read_records
    from .resume import RunFolder as RunFolder
    from .resume import load_checkpoint as load_checkpoint
    from .resume import newest_checkpoint as newest_checkpoint
    from .resume import write_checkpoint as write_checkpoint
    from .signals import Abort as Abort
    from .signals import Stop as Stop
    from .signals import parse_signals as parse_signals
    from .timing import Deadline as Deadline
    from .timing import Speed as Speed
    from .timing import process_age as process_age

#: Each public name and the module it lives in.
_HOMES = {
    "write_atomic": ".atomic",
    "CheckpointError": ".checkpoint",
    "RunLock": ".checkpoint",
    "check_losses": ".divergence",
    "diverged": ".divergence",
    "ConfigError": ".errors",
    "RunError": ".errors",
    "UsageError": ".errors",
    "flag": ".flags",
    "number": ".flags",
    "MetricsLog": ".metrics",
    "read_records": ".metrics",
    "RunFolder": ".resume",
    "load_checkpoint": ".resume",
    "newest_checkpoint": ".resume",
    "write_checkpoint": ".resume",
    "Abort": ".signals",
    "Stop": ".signals",
    "parse_signals": ".signals",
    "Deadline": ".timing",
    "Speed": ".timing",
    "process_age": ".timing",
}
_MODULES = (
    "atomic",
    "checkpoint",
    "cli",
    "divergence",
    "env",
    "errors",
    "flags",
    "metrics",
    "multiprocess",
    "outputs",
    "parallel",
    "progress",
    "records",
    "resume",
    "settings",
    "signals",
    "snapshot",
    "timing",
    "watchdog",
)

__all__ = [
    "write_atomic",
    "CheckpointError",
    "RunLock",
    "check_losses",
    "diverged",
    "ConfigError",
    "RunError",
    "UsageError",
    "flag",
    "number",
    "MetricsLog",
    "read_records",
    "RunFolder",
    "load_checkpoint",
    "newest_checkpoint",
    "write_checkpoint",
    "Abort",
    "Stop",
    "parse_signals",
    "Deadline",
    "Speed",
    "process_age",
    "atomic",
    "checkpoint",
    "cli",
    "divergence",
    "env",
    "errors",
    "flags",
    "lazy",
    "metrics",
    "multiprocess",
    "outputs",
    "parallel",
    "progress",
    "records",
    "resume",
    "settings",
    "signals",
    "snapshot",
    "timing",
    "watchdog",
]


__getattr__, __dir__ = _lazy.lazy(globals(), _HOMES, submodules=_MODULES)
