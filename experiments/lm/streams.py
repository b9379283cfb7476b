r"""Long streams cut into chunks: what each training step reads, and how held-out text is
laid out for scoring.

**Training (truncated BPTT).** The training bytes $x_0 \dots x_{n-1}$ are split into $B$
streams of $S = \lfloor (n - 1) / B \rfloor$ positions; stream $b$ reads
$x_{bS} \dots x_{bS + S}$. Step $s$ reads chunk $t = s \bmod T$ of every stream, with
$T = \lfloor S / L \rfloor$ chunks of length $L$ per pass: inputs $x_{bS + tL + i}$ and
targets $x_{bS + tL + i + 1}$, $i = 0 \dots L - 1$. The model's carry goes from one chunk
to the next; at $t = 0$ (a new pass over the text) every stream starts again from the
initial carry. A step's batch is a pure function of $s$, so a resumed run reads what an
uninterrupted one would.

**Scoring.** A held-out text is laid out the same way, in $B_e$ streams of
$S_e = L_e \lfloor (n - 1) / (B_e L_e) \rfloor$ positions read as $S_e / L_e$ chunks of
$L_e$: every position $1 \dots B_e S_e$ is predicted exactly once, from the text before it
in its stream. `eval_layout` returns the text these positions cover, on which the
n-gram baselines are scored too.
"""

import dataclasses

import numpy as np

__all__ = ["TrainStreams", "EvalLayout", "eval_layout"]


class TrainStreams:
    """`streams` streams of `chunk`-long chunks through `text` (module docstring)."""

    def __init__(self, text: np.ndarray, streams: int, chunk: int):
        self.text = np.asarray(text, np.uint8)
        self.streams, self.chunk = streams, chunk
        self.length = (self.text.size - 1) // streams
        self.per_pass = self.length // chunk
        if self.per_pass < 1:
            raise ValueError(
                f"the training split ({self.text.size:,} bytes) is too short for --streams "
                f"{streams} of --chunk {chunk} (each stream needs at least {chunk + 1} bytes): "
                "raise --train-bytes, or lower --streams or --chunk."
            )
        self._offsets = (np.arange(streams) * self.length)[:, None] + np.arange(chunk)[None, :]

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """Step `step`'s `(inputs, targets, reset)`: `(streams, chunk)` int32 arrays, and
        whether the streams start again (the first chunk of a pass)."""
        t = step % self.per_pass
        index = self._offsets + t * self.chunk
        x = self.text[index].astype(np.int32)
        y = self.text[index + 1].astype(np.int32)
        return x, y, t == 0


@dataclasses.dataclass(frozen=True)
class EvalLayout:
    """A held-out text as chunks: `inputs`, `targets` of shape `(chunks, streams, chunk)`,
    and `text`, the bytes whose positions `1 ...` they predict."""

    inputs: np.ndarray
    targets: np.ndarray
    text: np.ndarray

    @property
    def positions(self) -> int:
        return int(self.targets.size)


def eval_layout(text: np.ndarray, streams: int, chunk: int) -> EvalLayout:
    """Lay `text` out for scoring (module docstring).

    **Raises:** `ValueError` if `text` is shorter than one chunk per stream.
    """
    text = np.asarray(text, np.uint8)
    length = (text.size - 1) // (streams * chunk) * chunk
    if length < chunk:
        raise ValueError(
            f"a held-out split of {text.size:,} bytes is too short for --eval-streams "
            f"{streams} of --eval-chunk {chunk} (it needs {streams * chunk + 1:,} bytes): raise "
            "--val-bytes/--test-bytes, or lower --eval-streams or --eval-chunk."
        )
    index = (np.arange(streams) * length)[None, :, None] + (
        np.arange(length // chunk)[:, None, None] * chunk + np.arange(chunk)[None, None, :]
    )
    return EvalLayout(
        inputs=text[index].astype(np.int32),
        targets=text[index + 1].astype(np.int32),
        text=text[: streams * length + 1],
    )
