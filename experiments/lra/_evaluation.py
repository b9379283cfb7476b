"""Evaluation: a whole split (`evaluate`), the best weights on test, and the outputs at the
end of a run (`outputs`: results.json, curves.png, the closing line)."""

import io
import json
import time
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ..runs import checkpoint as ckpt
from ..runs import multiprocess as mp
from ..runs import parallel as par
from ..runs.atomic import write_atomic
from ..runs.errors import RunError
from ..runs.metrics import plot_curves, read_records
from ..runs.timing import Speed
from ._carry import Carry
from ._run import Run
from .data import batch_indices
from .steps import host_batch

__all__ = ["evaluate", "outputs"]


def evaluate(r: Run, params, bn_state, split) -> dict[str, Any]:
    """Loss and accuracy over a whole split (the last batch padded with weight 0)."""
    t0, bs, sums = time.perf_counter(), r.cfg.eval_batch_size, None
    assert bs is not None  # `config.new_run` defaults it to `batch_size`
    rows = par.process_rows(bs)
    for idx in batch_indices(len(split), bs, seed=0, epoch=0, shuffle=False, drop_last=False):
        weight = (np.arange(bs) < len(idx)).astype(np.float32)
        idx = np.concatenate([idx, np.zeros(bs - len(idx), idx.dtype)])
        host = host_batch(r.data, split, idx[rows], padded=True)
        host["weight"] = weight[rows]
        # Each batch after the previous one on every device (`mp.chained`): after a failed
        # collective no other may start.
        batch = mp.chained(par.shard_batch(host, r.mesh, bs), after=sums)
        part = r.steps.eval(params, bn_state, batch)
        sums = part if sums is None else sums + part
    jax.block_until_ready(sums)  # every device's: a collective may follow
    nll, correct, count = (float(v) for v in ckpt.to_host(sums))
    return {
        "loss": nll / count,
        "accuracy": correct / count,
        "examples": int(count),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _best(r: Run, carry: Carry, template) -> tuple[Any, ckpt.Record]:
    """The best-val weights and their JSON's record, from `OUT/best.eqx` (the run's own, by
    digest). With several processes, process 0 reads them once every process has finished
    the last save, and sends the bytes to the others (they need not see its disk)."""

    def read():
        pair = ckpt.locate(r.out, "best", sha256=carry.best_sha256) if carry.best_sha256 else None
        if pair is None:  # a checkpoint from before digests
            pair = ckpt.locate(r.out, "best")
        if pair is None:
            raise FileNotFoundError(f"No checkpoint file {str(r.out / 'best.json')!r}.")
        tree, meta = ckpt.load_pair(pair.json_path, pair.eqx_path, template)
        return tree, meta, pair

    if jax.process_count() == 1:
        tree, meta, pair = read()
        return tree, ckpt.Record.from_json(meta, where=pair.json_path)
    blob = None
    if r.primary:
        _, meta, pair = read()
        blob = json.dumps(meta).encode() + b"\n" + pair.eqx_path.read_bytes()
    text, data = mp.share(blob).split(b"\n", 1)
    record = ckpt.Record.from_json(json.loads(text), where=r.out / "best.json")
    if record.sha256 is not None and ckpt.sha256(data) != record.sha256:
        raise mp.shared(
            RunError("best.eqx changed while process 0 sent it to the others; run again.")
        )
    return eqx.tree_deserialise_leaves(io.BytesIO(data), ckpt.to_host(template)), record


def _test(r: Run, carry: Carry) -> dict[str, Any]:
    """Evaluate the best-val weights (`_best`) on test."""
    template = (eqx.combine(carry.params, r.static), carry.bn_state)
    (model, bn_state), best = _best(r, carry, template)
    params = par.replicate(eqx.filter(model, eqx.is_inexact_array), r.mesh)
    test = evaluate(r, params, par.replicate(bn_state, r.mesh), r.data.test)
    r.log.write(
        {
            "split": "test",
            "step": carry.step,
            "checkpoint": "best",
            "checkpoint_step": best.step,
            **test,
        }
    )
    return {
        "test_accuracy": test["accuracy"],
        "test_loss": test["loss"],
        "test_examples": test["examples"],
    }


def outputs(r: Run, carry: Carry, status: str, speed: Speed) -> dict[str, Any]:
    """Test score (when finished), results.json, curves.png and the closing line."""
    cfg, best, rate = r.cfg, carry.best or {}, speed.rate
    results = {
        "status": status,
        "task": cfg.task,
        "core": cfg.core,
        "form": cfg.form,
        "step": carry.step,
        "steps": cfg.steps,
        "best_val_accuracy": best.get("val_accuracy"),
        "best_step": best.get("step"),
        "steps_per_sec": rate,
        "devices": r.mesh.size,
        "platform": r.mesh.devices.flat[0].platform,
        "out": str(r.out),
    }
    if status != "finished":
        r.say(
            f"Stopped at step {carry.step}/{cfg.steps} ({status}); checkpoint "
            f"{r.out / 'last.eqx'} saved. Continue with the same command plus --resume."
        )
    else:
        results.update(_test(r, carry))
        # Every process of the run (a resumed run's earlier ones to their last
        # checkpoint), and this last one's.
        results["seconds"] = round(r.seconds_total(), 1)
        results["seconds_last_process"] = round(time.perf_counter() - r.began, 1)
        if r.primary:
            write_atomic(r.out / "results.json", json.dumps(results, indent=1).encode())
        r.say(
            f"{cfg.task} ({cfg.core}, {cfg.form}): test accuracy "
            f"{100 * results['test_accuracy']:.2f}% "
            f"(best val {100 * best['val_accuracy']:.2f}% at step {best['step']}), "
            f"{'n/a' if rate is None else f'{rate:.2f}'} steps/s; outputs in {r.out}/"
        )
    r.log.close()
    if r.primary:
        plot_curves(
            read_records(r.out / "metrics.jsonl"),
            r.out / "curves.png",
            title=f"{cfg.task} · {cfg.core} {cfg.form} · depth {cfg.depth}, "
            f"H={cfg.d_model}, N={cfg.d_state} · batch {cfg.batch_size}",
        )
    return results
