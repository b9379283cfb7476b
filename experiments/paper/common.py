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

DEFAULT_OUT = Path(__file__).resolve().parent / "figures"


def _parser(description: str = "") -> argparse.ArgumentParser:
    from experiments.runs.flags import NATURAL, output_folder

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--fast", action="store_true", help="tiny sizes (seconds; used by the test suite)"
    )
    parser.add_argument(
        "--out",
        type=output_folder,
        default=DEFAULT_OUT,
        help=f"output directory (default {DEFAULT_OUT})",
    )
    parser.add_argument("--seed", type=NATURAL, default=0, help="PRNG seed")
    return parser


def parse_args(argv: list[str] | None, doc: str | None) -> argparse.Namespace:
    """The shared flags, checked (a bad value or an unwritable --out is one `error:` line);
    `doc`: the script's docstring, whose first line describes it in `--help`."""
    args = _parser((doc or "").strip().split("\n")[0]).parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


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
