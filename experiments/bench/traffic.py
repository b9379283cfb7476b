r"""Bytes each implementation moves through device memory per call (a model), and the time
that traffic takes at the device's memory bandwidth: the floor a memory-bound layer cannot
beat, set beside the measured time.

The model counts sequence-long arrays read or written once per pass, per batch of $B$
sequences (float32 unless the name says bf16):

- $U = B L H \cdot 4$ bytes: one input-sized array (`u`, `y`, their cotangents);
- $X = B L \cdot 2N \cdot s$ bytes: one state-sized array (the drive $\bar B u$, the states,
  their cotangents; $2N$ real numbers per step, $s$ bytes each: 4, or 2 for bfloat16
  storage). Transitions repeated per step (App. A, the associative scan) count as one $X$.

Other cores (`impls.CORES`) are not modelled.

**Projections** (every LRU row): forward reads `u` and writes the drive ($U + X$), reads the
states and `u` and writes `y` ($X + 2U$); backward reads the output cotangent and writes the
states' ($U + X$), reads $\lambda$ with `u` and the states with the output cotangent for
the weight gradients ($2X + 2U$), writes the input cotangent ($U$): $3X + 4U$.

**Scans**, forward / backward extra:

- `sequential` and `pallas` (one segment): read the drive, write the states: $2X$; the
  backward's adjoint scan $2X$, and for the shared transition a loop over $\lambda$ and the
  states after it ($2X$, sequential) or the same pass reading the states once ($X$,
  pallas). The kernel's two-level scan ($L$ > its segment) reads the drive twice: $+X$ per
  scan.
- `associative` (`jax.lax.associative_scan` on $(a, b)$): each of its $\log_2 L$ levels
  reads the level's pairs and writes half as many on the way up, and reads half and writes
  all on the way down: about $3.5$ passes over each of the two arrays, $7X$, plus writing
  the repeated transitions ($X$): $8X$ per scan, forward and backward (custom VJP).
- `app_a`: the associative forward ($8X$) and JAX's autodiff of it, which stores the levels
  and replays them: about twice the forward, $16X$.

The model ignores caches (everything is assumed to come from device memory once per pass)
and compute: it is a lower bound for the time of a memory-bound layer, exact only in its
counting assumptions. Bandwidths are the vendors' peak figures.
"""

from .impls import CORES

# Peak memory bandwidth in GB/s by device kind (`jax.devices()[0].device_kind`), vendor
# figures; the longest matching prefix wins.
BANDWIDTH_GBS = {
    "NVIDIA H100 PCIe": 2000.0,
    "NVIDIA H100 80GB HBM3": 3350.0,
    "NVIDIA H100": 3350.0,
    "NVIDIA H200": 4800.0,
    "NVIDIA GH200": 4000.0,
    "NVIDIA A100-SXM4-80GB": 2039.0,
    "NVIDIA A100-PCIE-40GB": 1555.0,
    "NVIDIA A100": 1555.0,
    "NVIDIA L4": 300.0,
    "Tesla T4": 320.0,
}


def bandwidth_gbs(device_kind: str) -> float | None:
    """The peak bandwidth of `device_kind` in GB/s, or `None` if unknown (CPUs)."""
    matches = [k for k in BANDWIDTH_GBS if device_kind.startswith(k)]
    return BANDWIDTH_GBS[max(matches, key=len)] if matches else None


def _scan_passes(method: str, *, backward: bool, L: int, segment: int | None) -> float:
    """State-sized passes of one scan (and, backward, of the shared transition's sum)."""
    if method == "associative":
        return 8.0 + (2.0 if backward else 0.0)
    two_level = method == "pallas" and segment is not None and L > segment
    passes = 2.0 + (1.0 if two_level else 0.0)
    if backward:
        passes += 1.0 if method == "pallas" else 2.0
    return passes


def bytes_moved(
    impl: str, mode: str, *, B: int, H: int, N: int, L: int, segment: int | None = 2048
) -> int | None:
    """Modelled bytes of one call of implementation `impl` (a name of `impls.variants`) in
    `mode` ("fwd" or "grad"); `None` for a row the model does not cover."""
    U = B * L * H * 4
    grad = mode == "grad"
    if impl == "floor":
        X = B * L * 2 * N * 4
        return int(U + X + X + 2 * U + ((3 * X + 4 * U) if grad else 0))
    if impl == "app_a":
        X = B * L * 2 * N * 4
        return int(3 * U + 2 * X + 8 * X + ((3 * X + 4 * U + 16 * X) if grad else 0))
    if impl == "scan_autodiff" or impl.split("-")[0] in CORES:
        return None  # not modelled
    form, method, *rest = impl.split("-")
    X = B * L * 2 * N * (2 if rest == ["bf16"] else 4)
    total = 3 * U + 2 * X + _scan_passes(method, backward=False, L=L, segment=segment) * X
    if grad:
        total += 3 * X + 4 * U + _scan_passes(method, backward=True, L=L, segment=segment) * X
    return int(total)


def traffic_table(
    entry, names, *, mode: str, B: int, H: int, N: int, L: int, device_kind: str
) -> list[str]:
    """Markdown rows: modelled bytes, the time they take at the device's peak bandwidth,
    and the measured time (`entry` a grid result with `ms`), for every implementation."""
    bandwidth = bandwidth_gbs(device_kind)
    lines = [
        "| implementation | modelled GB | ms at peak bandwidth | measured ms | measured / model |",
        "|---|---|---|---|---|",
    ]
    measured = (entry or {}).get("ms", {})
    for impl in names:
        moved = bytes_moved(impl, mode, B=B, H=H, N=N, L=L)
        if moved is None:
            continue
        at_peak = None if bandwidth is None else moved / (bandwidth * 1e9) * 1e3
        ms = measured.get(impl)
        lines.append(
            f"| {impl} | {moved / 1e9:.2f} | "
            + ("–" if at_peak is None else f"{at_peak:.2f}")
            + f" | {'–' if ms is None else f'{ms:.2f}'} | "
            + ("–" if at_peak is None or ms is None else f"{ms / at_peak:.1f}")
            + " |"
        )
    if bandwidth is None:
        lines += ["", f"(No peak bandwidth known for `{device_kind}`: times at bandwidth omitted.)"]
    return lines
