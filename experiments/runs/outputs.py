"""Whose files a folder holds: a command's outputs are recognised by a manifest the command
wrote (`MANIFEST`, its own fields), never by a file's name, so that a folder holding the
user's files too is safe.

- A new run (`RunFiles.claim`) refuses a folder where a file it would write exists and is
  not the command's (a user's own `config.json`, `results.json`...), with or without
  `--overwrite`: that file is named, and nothing is removed.
- `--overwrite` removes what the manifest lists (the files that command writes there), and
  the exports made from the run into `RUN/export/` (pairs that `eqx_lru.export` recognises
  as its own by their content), nothing else; then the new run writes its manifest.
- A run written before manifests existed is recognised by its content (`legacy`: a
  complete `last` checkpoint, or a settings file of the trainer's form).

The manifest (`FOLDER/.outputs.json`): `{"outputs_of": COMMAND, "files": [NAMES],
"format": 1, "written": UTC}`; `NAMES` are plain names inside the folder.
"""

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .atomic import write_atomic
from .errors import UsageError

__all__ = ["MANIFEST", "RunFiles", "remove_exports", "trainer_run", "CHECKPOINT_FILES"]

#: The manifest's name in a command's folder.
MANIFEST = ".outputs.json"
_FORMAT = 1


#: A trainer's checkpoint files (`name` and its previous generation, JSON and `.eqx`).
def CHECKPOINT_FILES(*names: str) -> tuple[str, ...]:  # noqa: N802 (a constant's maker)
    return tuple(
        f"{n}{gen}{ext}" for n in names for gen in ("", ".prev") for ext in (".json", ".eqx")
    )


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def trainer_run(keys: Sequence[str]) -> Callable[[Path], bool]:
    """The `legacy` test of a trainer's run written before manifests, by content: a `last`
    checkpoint record (a JSON object with its integer `step`), or a
    `config.json` holding the trainer's settings `keys` (its `run_id` among them)."""

    def test(folder: Path) -> bool:
        for name in ("last.json", "last.prev.json"):
            record = _json_object(folder / name)
            if record is not None and isinstance(record.get("step"), int):
                return True
        config = _json_object(folder / "config.json")
        return config is not None and set(keys) | {"run_id"} <= set(config)

    return test


def _plain(name: Any) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


class RunFiles:
    """The files `command` writes in `folder` (`names`, checkpoints first: a removal cut
    short leaves no checkpoint to resume), recorded in its manifest.

    `legacy(folder)`: whether `folder` holds a run of this command written before
    manifests (recognised by its content); `exports`: `--overwrite` also removes the
    exports in `folder/export/`."""

    def __init__(
        self,
        folder: str | Path,
        command: str,
        names: Sequence[str],
        *,
        legacy: Callable[[Path], bool] | None = None,
        exports: bool = True,
        flag: str = "--out",
    ):
        self.folder, self.command, self.names = Path(folder), command, tuple(names)
        self.legacy, self.exports, self.flag = legacy, exports, flag
        self.path = self.folder / MANIFEST

    def read(self) -> dict[str, Any] | None:
        """The manifest, checked, or None where there is none. **Raises:** `UsageError`
        for a file at its name that is not one, or one of another command."""
        if not (self.path.exists() or self.path.is_symlink()):
            return None
        try:
            if self.path.is_symlink() or not self.path.is_file():
                raise ValueError("not a regular file")
            record = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or record.get("format") != _FORMAT:
                raise ValueError("not a manifest of eqx_lru's experiments")
            files = record.get("files")
            if not isinstance(files, list) or not all(_plain(n) for n in files):
                raise ValueError("its 'files' is not a list of names in the folder")
            if not isinstance(record.get("outputs_of"), str):
                raise ValueError("its 'outputs_of' is not a command's name")
        except (OSError, ValueError) as e:
            raise UsageError(
                f"{self.flag} {str(self.folder)!r}: {self.path} cannot be read as the record of "
                f"a command's outputs ({e}); move it away, or choose another {self.flag}."
            ) from None
        if record["outputs_of"] != self.command:
            raise UsageError(
                f"{self.flag} {str(self.folder)!r} holds the outputs of `{record['outputs_of']}` "
                f"(its {MANIFEST}), not a `{self.command}` run; choose another {self.flag}."
            )
        return record

    def holds_run(self) -> bool:
        """Whether `folder` holds a run of this command (its manifest, or a legacy run)."""
        if self.read() is not None:
            return True
        return self.folder.is_dir() and self.legacy is not None and self.legacy(self.folder)

    def _started(self) -> bool:
        """Whether the run got as far as its settings or a checkpoint (`legacy`'s test;
        without one, any run counts)."""
        return self.legacy is None or self.legacy(self.folder)

    def foreign(self) -> list[Path]:
        """The files this command would write that exist and are not its own (none in a
        folder that holds its run)."""
        if self.holds_run():
            return []
        there = [self.folder / n for n in self.names]
        return [p for p in there if p.exists() or p.is_symlink()]

    def claim(self, *, resume: bool, overwrite: bool, write: bool = True) -> None:
        """Check the folder for the run: `resume` needs a run of this command there; a new
        one needs none (or `overwrite`, which removes it) and no foreign file at the names
        it writes. With `write` (the process that writes the folder, holding its lock),
        removes what `overwrite` replaces and records the manifest.
        **Raises:** `UsageError`, one line."""
        out, ours = self.folder, self.holds_run()
        if resume:
            if not ours:
                raise UsageError(
                    f"--resume: {out} holds no `{self.command}` run to continue (no {MANIFEST} "
                    "nor checkpoint); drop --resume to start one."
                )
        elif ours and not self._started():  # stopped before its settings: nothing to keep
            if write:
                self.remove()
        elif ours:
            if not overwrite:
                raise UsageError(
                    f"{out} already holds a run. Pass --resume to continue it, --overwrite to "
                    "replace it with a new one (only the files the run wrote are removed), or "
                    f"choose another {self.flag}."
                )
            if write:
                self.remove()
        else:
            foreign = self.foreign()
            if foreign:
                raise UsageError(
                    f"{self.flag} {str(out)!r}: {foreign[0]} exists and was not written by "
                    f"`{self.command}` (the folder holds no run of it: no {MANIFEST}); a new "
                    f"run would write over it, so nothing was changed (--overwrite removes only "
                    f"a run's own files). Move it away, or choose another {self.flag}."
                )
        if write:
            self.record()

    def record(self) -> None:
        """Write the manifest (atomically)."""
        record = {
            "outputs_of": self.command,
            "files": list(self.names),
            "format": _FORMAT,
            "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        write_atomic(self.path, json.dumps(record, indent=1).encode())

    def remove(self) -> None:
        """Remove the run: the files its manifest lists (or, for a legacy run, `names`),
        the exports made from it, then the manifest."""
        record = self.read()
        names = record["files"] if record is not None else self.names
        for name in names:
            p = self.folder / name
            if p.is_symlink() or p.is_file():
                p.unlink(missing_ok=True)
        if self.exports:
            remove_exports(self.folder / "export")
        self.path.unlink(missing_ok=True)


def remove_exports(folder: Path) -> None:
    """Remove the artifact/manifest pairs in `folder` that `eqx_lru.export` wrote (as it
    recognises them: its manifest, the artifact's SHA-256), then `folder` if empty."""
    if folder.is_symlink() or not folder.is_dir():
        return
    from eqx_lru.export._files import foreign

    for manifest in sorted(folder.glob("*.json")):
        artifact = manifest.with_suffix("")
        try:
            ours = foreign(artifact) is None
        except OSError:
            ours = False
        if ours:
            artifact.unlink(missing_ok=True)
            manifest.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()
