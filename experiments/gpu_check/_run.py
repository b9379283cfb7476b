"""One run of the check: its clock and budget, its state (the report) and its child
processes. The parts (`_parts.py`) fill `state["parts"][name]`; every change that matters is
saved at once (`save`), so a run killed at any moment leaves what it had."""

import datetime
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import _plan
from ._jobs import Job, run_job
from ._machine import REPO, child_env
from ._report import write_report

__all__ = ["Check", "Interrupted", "catch_signals", "restore_signals"]


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived: stop the running part, save, exit 130."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def catch_signals() -> dict[int, Any]:
    """Turn SIGINT, SIGTERM and SIGHUP into `Interrupted`; returns the handlers before."""
    return {
        sig: signal.signal(sig, _raise) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }


def restore_signals(handlers: dict[int, Any]) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


class Check:
    """The run: `out`, the budget, the sizes (`_plan.GPU` or `_plan.DRY`), the state."""

    def __init__(
        self,
        out: Path,
        *,
        budget: float,
        dry: bool,
        parts: Sequence[str],
        started: tuple[float, float] | None = None,
    ):
        self.out, self.budget, self.dry = out, budget, dry
        self.sizes = _plan.DRY if dry else _plan.GPU
        self.t0, self.t0_wall = started or (time.monotonic(), time.time())
        self.cache = out / "jax-cache"
        self.background: dict[str, Job] = {}
        title = "GPU check" + (" (dry run on the CPU, tiny sizes)" if dry else "")
        self.state: dict[str, Any] = {
            "title": title,
            "dry_run": dry,
            "budget_s": budget,
            "started": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "elapsed_s": 0.0,
            "status": "starting",
            "machine": {},
            "plan": _plan.plan_rows(budget),
            "parts": {
                p.name: {"title": p.title, "status": "pending", "seconds": 0.0, "summary": ""}
                if p.name in parts
                else {"title": p.title, "status": "skipped", "summary": "not asked for (--parts)"}
                for p in _plan.PARTS
            },
        }

    # --- time ---------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def end(self, name: str) -> float:
        """The `time.monotonic()` by which part `name`, starting now, must stop."""
        return self.t0 + _plan.part_end(name, budget=self.budget, elapsed=self.elapsed())

    def wall(self, monotonic: float) -> float:
        """`monotonic` as a `time.time()` (what the child processes compare with)."""
        return self.t0_wall + (monotonic - self.t0)

    # --- state --------------------------------------------------------------------------

    def part(self, name: str) -> dict[str, Any]:
        return self.state["parts"][name]

    def save(self) -> None:
        self.state["elapsed_s"] = round(self.elapsed(), 1)
        write_report(self.out, self.state)

    def say(self, text: str) -> None:
        print(f"gpu-check [{self.elapsed():4.0f} s]: {text}", file=sys.stderr, flush=True)

    # --- children -----------------------------------------------------------------------

    def env(self, **extra: Any) -> dict[str, str]:
        return child_env(dry=self.dry, cache=self.cache, **extra)

    def start(self, cmd: Sequence[str], log: str, **env: Any) -> Job:
        return Job(cmd, log=self.out / "logs" / f"{log}.log", env=self.env(**env), cwd=REPO)

    def wait(
        self,
        job: Job,
        kill_at: float,
        update: Callable[[], object],
        watch: Sequence[Path] = (),
    ) -> tuple[int, bool]:
        """Wait for `job` until `kill_at`; whenever a file of `watch` changes, `update()`
        the state and save the report. Returns the exit status and whether time ran out."""
        seen: dict[Path, tuple[float, int]] = {}

        def poll() -> None:
            changed = False
            for path in watch:
                try:
                    stat = path.stat()
                except OSError:
                    continue
                key = (stat.st_mtime, stat.st_size)
                changed |= seen.get(path) != key
                seen[path] = key
            if changed:
                update()
                self.save()

        try:
            return run_job(job, kill_at=kill_at, on_poll=poll)
        finally:
            update()

    def stop_background(self) -> None:
        for job in self.background.values():
            job.stop()
