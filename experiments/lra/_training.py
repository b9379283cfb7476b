"""The training loop (`train_until_stop`): steps, then logging, evaluation and checkpoints as
they fall due, until the end, `--stop-at`, `--time-limit` or a signal."""

import concurrent.futures
import dataclasses

import equinox as eqx
import jax
import numpy as np

from ..runs import checkpoint as ckpt
from ..runs import multiprocess as mp
from ..runs import parallel as par
from ..runs.divergence import check_losses, diverged
from ..runs.errors import RunError
from ..runs.progress import progress_bar
from ..runs.resume import write_checkpoint
from ..runs.signals import Stop
from ..runs.timing import Deadline, Speed
from ._carry import Carry
from ._evaluation import evaluate
from ._run import Run
from .data import batch_indices
from .steps import host_batch

__all__ = ["Loop", "train_until_stop"]


class Loop:
    """The training loop: steps, then logging, evaluation and checkpoints as they fall due."""

    def __init__(self, r: Run, stop_at: int, hook, deadline: Deadline):
        self.r, self.cfg, self.stop_at, self.hook, self.deadline = r, r.cfg, stop_at, hook, deadline
        self.per_epoch = len(r.data.train) // r.cfg.batch_size
        self.rows = par.process_rows(r.cfg.batch_size)
        self.speed, self.postfix, self.saved_step = Speed(), {}, None
        self.vote = mp.StopVote(mesh=r.mesh)
        self.last = None  # the output of the last program with collectives (`mp.chained`)
        self.complete: Carry | None = None  # see `_steps`
        self._epoch: tuple[int, list[np.ndarray]] | None = None

    def batch(self, step: int) -> dict[str, jax.Array]:
        """The batch of `step`: a pure function of (seed, epoch, position)."""
        epoch, position = divmod(step, self.per_epoch)
        if self._epoch is None or self._epoch[0] != epoch:
            order = batch_indices(
                len(self.r.data.train),
                self.cfg.batch_size,
                seed=self.cfg.seed,
                epoch=epoch,
                shuffle=True,
                drop_last=True,
            )
            self._epoch = (epoch, order)
        idx = self._epoch[1][position][self.rows]
        host = host_batch(self.r.data, self.r.data.train, idx, padded=False)
        return par.shard_batch(host, self.r.mesh, self.cfg.batch_size)

    def step(self, c: Carry, batch, counter: jax.Array) -> Carry:
        """Step `c.step + 1`; `counter`: `c.step` as the vote returned it."""
        p, s, o, metrics = self.r.steps.train(
            c.params, c.bn_state, c.opt_state, batch, c.run_key, counter
        )
        self.last = metrics
        c = dataclasses.replace(
            c, step=c.step + 1, params=p, bn_state=s, opt_state=o, pending=c.pending + (metrics,)
        )
        if not self.speed.running:  # the first step of this process compiles: not timed
            jax.block_until_ready(metrics)
            self.speed.resume(c.step)
        return c

    def after_step(self, c: Carry) -> Carry:
        """Log, evaluate and checkpoint as due after step `c.step`; returns the new carry."""
        done, total = c.step, self.cfg.steps
        if done % self.cfg.log_every == 0 or done == total:
            c = self.log_train(c)
        if done % self.cfg.eval_every == 0 or done == total:
            c = self.validate(c)
        if done % self.cfg.checkpoint_every == 0 or done == self.stop_at:
            self.speed.pause(done)
            c = self.save(c)
        if self.r.bar is not None:
            self.r.bar.update(done - self.r.bar.n)
            self.r.bar.set_postfix(self.postfix, refresh=False)
        if not self.speed.running:
            self.speed.resume(done)
        return c

    def log_train(self, c: Carry) -> Carry:
        values = np.asarray(ckpt.to_host(list(c.pending)), np.float64)
        _check_finite(self.r, values, c.step)
        self.r.log.write(
            {
                "split": "train",
                "step": c.step,
                "epoch": (c.step - 1) // self.per_epoch,
                "loss": float(values[:, 0].mean()),
                "accuracy": float(values[:, 1].mean()),
                "lr": float(values[-1, 2]),
                "steps_per_sec": self.speed.interval(c.step),
            }
        )
        self.postfix.update(loss=f"{values[:, 0].mean():.3f}", acc=f"{values[:, 1].mean():.3f}")
        return dataclasses.replace(c, pending=())

    def validate(self, c: Carry) -> Carry:
        jax.block_until_ready(c.params)
        self.speed.pause(c.step)
        val = evaluate(self.r, c.params, c.bn_state, self.r.data.val)
        self.r.log.write({"split": "val", "step": c.step, **val})
        if c.best is None or val["accuracy"] > c.best["val_accuracy"]:
            # Kept on the host and written with the next checkpoint (`save`): `best.*` and
            # `last.*` then always belong together.
            tree = (
                ckpt.to_host((eqx.combine(c.params, self.r.static), c.bn_state))
                if self.r.primary
                else None
            )
            best = {"val_accuracy": val["accuracy"], "val_loss": val["loss"], "step": c.step}
            c = dataclasses.replace(c, best=best, best_tree=tree, best_sha256=None)
        self.postfix.update(val=f"{val['accuracy']:.3f}")
        rate, best = self.speed.rate, c.best
        assert best is not None  # set above on the first validation
        self.r.say(
            f"step {c.step}/{self.cfg.steps}: train loss {self.postfix.get('loss', '-')} acc "
            f"{self.postfix.get('acc', '-')}; val loss {val['loss']:.4f} acc "
            f"{val['accuracy']:.4f} (best "
            f"{best['val_accuracy']:.4f} at step {best['step']}); "
            f"{'-' if rate is None else f'{rate:.2f}'} steps/s"
        )
        return c

    def save(self, c: Carry) -> Carry:
        """Write `best.*` (if it changed) and then `last.*` (refusing non-finite state: the
        previous stays); returns the carry with the best weights marked as written. With
        several processes, process 0 writes and every process waits for it: a failure there
        stops them all."""
        # Every device's last program first: `settle` launches a collective (`chained`).
        jax.block_until_ready(self.last)
        digest = mp.settle(lambda: self._write(c))
        self.saved_step = c.step
        if self.r.primary:
            c = dataclasses.replace(c, best_tree=None, best_sha256=digest)
        return c

    def _write(self, c: Carry) -> str | None:
        if c.pending:
            _check_finite(self.r, np.asarray(ckpt.to_host(list(c.pending)), np.float64), c.step)
        if not self.r.primary:
            return None
        tree = ckpt.to_host(c.tree())
        bad = ckpt.nonfinite_leaves(tree[:3])
        if bad:
            raise RunError(
                _diverged(self.r, c.step, f"the parameters or optimiser state ({bad[0]})")
            )
        meta = {
            "step": c.step,
            "epoch": c.step // self.per_epoch,
            "position": c.step % self.per_epoch,
            "best": c.best,
            "pending": [list(map(float, x)) for x in ckpt.to_host(c.pending)],
            "config": self.cfg.to_json(),
            "data": self.r.fingerprint,
            "run_id": self.cfg.run_id,
            "seconds_total": round(self.r.seconds_total(), 1),  # every process's, so far
        }

        def write():
            digest = c.best_sha256
            if c.best_tree is not None:
                assert c.best is not None  # `validate` sets both
                digest = ckpt.save(
                    self.r.out,
                    "best",
                    c.best_tree,
                    {**c.best, "config": self.cfg.to_json(), "run_id": self.cfg.run_id},
                )
            ckpt.save(self.r.out, "last", tree, {**meta, "best_sha256": digest})
            return digest

        return write_checkpoint(self.r, lambda: self.deadline.timed_save(write))


def _check_finite(r: Run, values: np.ndarray, step: int) -> None:
    """Stop the run if a logged loss is NaN or infinite."""
    check_losses(r.out, values, step, _advice(r))


def _diverged(r: Run, step: int, what: str) -> str:
    return diverged(r.out, step, what, _advice(r))


def _advice(r: Run) -> str:
    return (
        f"Start again with a lower --lr (now {r.cfg.lr:g}) or --lr-factor (now "
        f"{r.cfg.lr_factor:g}) and a fresh --out; resuming would repeat the same steps."
    )


def _too_short(loop: Loop, step: int) -> None:
    d = loop.deadline
    raise RunError(
        f"--time-limit {loop.r.args.time_limit:g} min is too short for one step: "
        f"{d.clock() - d.started:.0f} s of it went to starting the process, loading the data "
        "and building the model, and what is left cannot fit a step and its checkpoint. The "
        f"run made no progress (its checkpoint, if any, is unchanged at step {step}). Raise "
        "--time-limit."
    )


def train_until_stop(r: Run, carry: Carry, hook, clock) -> tuple[Carry, str, Speed]:
    """Run steps until the end, `--stop-at`, `--time-limit` or a signal; returns the last
    complete carry, the status and the speed of the steps."""
    total, args = r.cfg.steps, r.args
    stop_at = total if args.stop_at is None else min(max(args.stop_at, carry.step), total)
    loop = Loop(r, stop_at, hook, Deadline(args.time_limit, clock, started=r.started))
    status = "finished" if stop_at == total else "stopped"
    if r.primary and not args.no_progress and carry.step < stop_at:
        r.bar = progress_bar(total=total, initial=carry.step, desc=f"{r.cfg.task} {r.cfg.core}")
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lra-data")
    stopper = r.stop if r.stop is not None else Stop()
    stopper.training = True  # from now on a signal stops the run after a checkpoint
    try:
        try:
            carry, stopped = _steps(loop, carry, pool, stopper)
        except KeyboardInterrupt:
            assert loop.complete is not None  # `_steps` sets it first
            carry, stopped = loop.complete, None
            status = "interrupted"
        if stopped is not None:
            status = "stopped"
            r.say(stopped)
        if status != "finished" and loop.saved_step != carry.step:
            carry = loop.save(carry)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if r.bar is not None:
            r.bar.close()
    loop.speed.pause(carry.step)
    return carry, status, loop.speed


def _steps(loop: Loop, carry: Carry, pool, stopper) -> tuple[Carry, str | None]:
    """The loop proper; `loop.complete` is the last carry whose step, logging, evaluation
    and checkpoint all finished (what an interrupt saves). Returns the carry and, if the
    run stopped early (a warning signal, `--time-limit`), why."""
    loop.complete, first = carry, carry.step
    future = pool.submit(loop.batch, carry.step) if carry.step < loop.stop_at else None
    while carry.step < loop.stop_at:
        # Every process stops after the same step (`StopVote`): 3 an interrupt, 2 a
        # scheduler's warning, 1 the time limit.
        wish = 3 if stopper.reason else 2 if stopper.warned else int(loop.deadline.expired())
        decision, counter = loop.vote.decide(wish, step=carry.step, after=loop.last)
        if decision == 3:
            raise KeyboardInterrupt
        if decision == 2:
            return carry, (
                f"{stopper.warned or 'a signal to another process'} (a scheduler's warning, "
                f"--save-signals): stopping at step {carry.step}; continue with --resume."
            )
        if decision == 1:
            if carry.step == first:  # not one step: a chain of such jobs would never progress
                _too_short(loop, carry.step)
            return (
                carry,
                f"--time-limit {loop.r.args.time_limit:g} min: stopping before the deadline.",
            )
        loop.deadline.start_iteration()
        assert future is not None  # submitted while a step is left
        batch = future.result()
        future = pool.submit(loop.batch, carry.step + 1) if carry.step + 1 < loop.stop_at else None
        carry = loop.complete = loop.after_step(loop.step(carry, batch, counter))
        if loop.hook is not None:
            loop.hook(carry.step)
        loop.deadline.end_iteration()
    return carry, None
