"""What every figure script shares: the command line, and writing the PNG and the JSON."""

import argparse
import io
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless, and no GUI-backend warnings (the tests turn warnings into errors)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .command import PAPER_FIGURES as DEFAULT_OUT  # noqa: E402
from .command import _parser as _command_parser  # noqa: E402


def _parser(description: str = "") -> argparse.ArgumentParser:
    """The figure scripts' flags (`command.py`; walked by tests/experiments/test_cli_flags.py)."""
    return _command_parser(description, DEFAULT_OUT)


def save_figure(fig, out: Path, name: str, *, dpi: int = 90) -> Path:
    """Write `fig` as `out/name.png` and close it.

    The PNGs are committed, so they are kept small: a 256-colour palette image (line plots
    use few colours, so this is visually lossless) written with PNG optimisation."""
    from PIL import Image

    path = out / f"{name}.png"
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png")
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=256).save(path, optimize=True)
    return path


def _plain(value):
    """JSON-ready: NumPy/JAX scalars and arrays to Python numbers and lists; NaN/inf to str."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _plain(np.asarray(value).tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def save_json(data: dict, out: Path, name: str) -> Path:
    path = out / f"{name}.json"
    path.write_text(json.dumps(_plain(data), indent=1, sort_keys=False) + "\n")
    return path
