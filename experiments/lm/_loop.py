"""The training loop (`train_until_stop`): steps, then logging, validation and checkpoints
as they fall due, until the last step, `--stop-at`, `--time-limit` or a signal (SIGINT,
SIGTERM, SIGHUP: a checkpoint, status 130; a scheduler's warning, `--save-signals`: a
checkpoint, status 0). Its parts are the LRA trainer's: `Stop` (signals), `Deadline` and
`Speed` (time), the checkpoint store, `write_checkpoint` (a second signal waits for a
save)."""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from ..runs import checkpoint as ckpt
from ..runs.divergence import check_losses, diverged
from ..runs.errors import RunError
from ..runs.progress import progress_bar
from ..runs.resume import write_checkpoint
from ..runs.signals import Stop
from ..runs.timing import Deadline, Speed
from ._run import Run, TrainState
from .model import score_layout

__all__ = ["Loop", "train_until_stop"]


class Loop:
    """One process's steps of the run, and what falls due after each."""

    def __init__(self, r: Run, stop_at: int, hook, deadline: Deadline):
        self.r, self.cfg, self.stop_at, self.hook, self.deadline = r, r.cfg, stop_at, hook, deadline
        self.speed, self.postfix, self.saved_step = Speed(), {}, None
        self.complete: TrainState | None = None  # the last state whose saves all finished

    def step(self, s: TrainState) -> TrainState:
        x, y, reset = self.r.streams.batch(s.step)
        params, opt_state, carry, metrics = self.r.programs.train(
            s.params,
            s.opt_state,
            s.carry,
            jnp.asarray(x),
            jnp.asarray(y),
            jnp.asarray(reset),
            s.run_key,
            jnp.asarray(s.step, jnp.int32),
        )
        s = TrainState(s.step + 1, params, opt_state, carry, s.run_key, s.pending + (metrics,))
        if not self.speed.running:  # the first step of this process compiles: not timed
            jax.block_until_ready(metrics)
            self.speed.resume(s.step)
        return s

    def after_step(self, s: TrainState) -> TrainState:
        done, total = s.step, self.cfg.steps
        if done % self.cfg.log_every == 0 or done == total:
            s = self.log_train(s)
        if done % self.cfg.eval_every == 0 or done == total:
            self.validate(s)
        if done % self.cfg.checkpoint_every == 0 or done == self.stop_at:
            self.speed.pause(done)
            self.save(s)
        if self.r.bar is not None:
            self.r.bar.update(done - self.r.bar.n)
            self.r.bar.set_postfix(self.postfix, refresh=False)
        if not self.speed.running:
            self.speed.resume(done)
        return s

    def log_train(self, s: TrainState) -> TrainState:
        values = np.asarray(ckpt.to_host(list(s.pending)), np.float64)
        _check_finite(self.r, values, s.step)
        loss = float(values[:, 0].mean())
        self.r.log.write(
            {
                "split": "train",
                "step": s.step,
                "loss": loss,
                "bits_per_byte": loss / np.log(2),
                "accuracy": float(values[:, 1].mean()),
                "lr": float(values[-1, 2]),
                "steps_per_sec": self.speed.interval(s.step),
            }
        )
        self.postfix.update(bpb=f"{loss / np.log(2):.3f}")
        return dataclasses.replace(s, pending=())

    def validate(self, s: TrainState) -> None:
        jax.block_until_ready(s.params)
        self.speed.pause(s.step)
        t0 = time.perf_counter()
        val = score_layout(self.r.programs, s.params, self.r.val)
        seconds = time.perf_counter() - t0
        self.r.log.write({"split": "val", "step": s.step, **val, "seconds": seconds})
        self.postfix.update(val=f"{val['bits_per_byte']:.3f}")
        bigram = self.r.baselines["val"]["bigram_kneser_ney"]
        rate = self.speed.rate
        self.r.say(
            f"step {s.step}/{self.cfg.steps}: train {self.postfix.get('bpb', '-')} bits/byte; "
            f"val {val['bits_per_byte']:.3f} bits/byte (bigram {bigram:.3f}), accuracy "
            f"{val['accuracy']:.3f}{'' if rate is None else f'; {rate:.2f} steps/s'}"
        )

    def save(self, s: TrainState) -> None:
        """Write `last.*` (refusing non-finite state: the previous checkpoint stays)."""
        if s.pending:
            _check_finite(self.r, np.asarray(ckpt.to_host(list(s.pending)), np.float64), s.step)
        tree = ckpt.to_host(s.tree())
        bad = ckpt.nonfinite_leaves(tree[:3])
        if bad:
            raise RunError(_diverged(self.r, s.step, f"the parameters or carry ({bad[0]})"))
        meta = {
            "step": s.step,
            "pending": [list(map(float, x)) for x in ckpt.to_host(s.pending)],
            "config": self.cfg.to_json(),
            "run_id": self.cfg.run_id,
            "corpus_sha256": self.cfg.corpus_sha256,
        }
        write = lambda: ckpt.save(self.r.out, "last", tree, meta)  # noqa: E731
        write_checkpoint(self.r, lambda: self.deadline.timed_save(write))
        self.saved_step = s.step


def _check_finite(r: Run, values: np.ndarray, step: int) -> None:
    check_losses(r.out, values, step, _advice(r))


def _diverged(r: Run, step: int, what: str) -> str:
    return diverged(r.out, step, what, _advice(r))


def _advice(r: Run) -> str:
    return f"Start again with a lower --lr (now {r.cfg.lr:g}) and a fresh --out."


def train_until_stop(r: Run, s: TrainState, hook, clock) -> tuple[TrainState, str, Speed]:
    """Steps until the end, `--stop-at`, `--time-limit` or a signal; returns the last
    complete state, the status (`finished`; `stopped`: `--stop-at`, `--time-limit` or a
    scheduler's warning, `--save-signals`; or `interrupted`) and the speed."""
    total, args = r.cfg.steps, r.args
    stop_at = total if args.stop_at is None else min(max(args.stop_at, s.step), total)
    loop = Loop(r, stop_at, hook, Deadline(args.time_limit, clock, started=r.started))
    status = "finished" if stop_at == total else "stopped"
    if not args.no_progress and s.step < stop_at:
        r.bar = progress_bar(total=total, initial=s.step, desc="lm")
    stopper = r.stop if r.stop is not None else Stop()
    stopper.training = True  # from now on a signal stops the run after a checkpoint
    try:
        try:
            s, stopped = _steps(loop, s, stopper)
        except KeyboardInterrupt:
            assert loop.complete is not None  # `_steps` sets it first
            s, stopped, status = loop.complete, None, "interrupted"
        if stopped is not None:
            status = "stopped"
            r.say(stopped)
        if status != "finished" and loop.saved_step != s.step:
            loop.save(s)
    finally:
        if r.bar is not None:
            r.bar.close()
            r.bar = None
    loop.speed.pause(s.step)
    return s, status, loop.speed


def _steps(loop: Loop, s: TrainState, stopper: Stop) -> tuple[TrainState, str | None]:
    """The loop proper; `loop.complete` is the last state whose step and what fell due
    after it all finished (what an interrupt saves). Returns the state and, if the run
    stops early (a scheduler's warning, `--time-limit`), why."""
    loop.complete, first = s, s.step
    while s.step < loop.stop_at:
        if stopper.reason is not None:
            raise KeyboardInterrupt
        if stopper.warned is not None:
            return s, (
                f"{stopper.warned} (a scheduler's warning, --save-signals): stopping at step "
                f"{s.step}; continue with --resume."
            )
        if loop.deadline.expired():
            if s.step == first:  # not one step: a chain of such jobs would never progress
                _too_short(loop, s.step)
            return s, f"--time-limit {loop.r.args.time_limit:g} min: stopping before the deadline."
        loop.deadline.start_iteration()
        s = loop.complete = loop.after_step(loop.step(s))
        if loop.hook is not None:
            loop.hook(s.step)
        loop.deadline.end_iteration()
    return s, None


def _too_short(loop: Loop, step: int) -> None:
    d = loop.deadline
    raise RunError(
        f"--time-limit {loop.r.args.time_limit:g} min is too short for one step: "
        f"{d.clock() - d.started:.0f} s of it went to starting the process, reading the corpus "
        "and building the model. The run made no progress (its checkpoint, if any, is "
        f"unchanged at step {step}). Raise --time-limit."
    )
