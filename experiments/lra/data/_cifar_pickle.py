"""A pickle reader that builds only what the official `cifar-10-batches-py` files hold.

`pickle.load` runs whatever callable a file names (`os.system`, say): a crafted "CIFAR
batch" would run code in the trainer. An official batch holds a dict with bytes keys,
bytes, lists of ints and bytes, and one NumPy array, which a pickle rebuilds through three
NumPy callables (the array reconstructor, `ndarray`, `dtype`; `_frombuffer` for files
re-saved with protocol 5). `load` resolves exactly those names, under NumPy 1's
(`numpy.core`) and NumPy 2's (`numpy._core`) module paths, to the functions NumPy itself
pickles with, and refuses every other global before anything is called.
"""

import pickle
from typing import BinaryIO

import numpy as np

_ARRAY = np.zeros(1, np.uint8)
#: The callables NumPy's own pickles name, taken from NumPy (so no deprecated module is
#: imported): the reconstructor of protocol <= 4 and `_frombuffer` of protocol 5.
_RECONSTRUCT = _ARRAY.__reduce__()[0]
_FROMBUFFER = _ARRAY.__reduce_ex__(5)[0]
ALLOWED = {
    **{
        (f"{core}.multiarray", "_reconstruct"): _RECONSTRUCT
        for core in ("numpy.core", "numpy._core")
    },
    **{(f"{core}.numeric", "_frombuffer"): _FROMBUFFER for core in ("numpy.core", "numpy._core")},
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class RefusedGlobal(pickle.UnpicklingError):
    """The pickle asks for a global that no official CIFAR-10 batch holds."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise RefusedGlobal(
                f"not a CIFAR-10 batch: the pickle asks for {module}.{name}, which the "
                "official cifar-10-batches-py files never do (a pickle can run code, so "
                "only dicts, lists, bytes, numbers and NumPy arrays are read). Download "
                "the batches again from the CIFAR-10 site."
            ) from None


def load(file: BinaryIO) -> object:
    """The object pickled in `file` (Python 2 strings as bytes, as the official files were
    written), built with the NumPy callables of `ALLOWED` only; `RefusedGlobal` for any
    other."""
    return _Unpickler(file, encoding="bytes").load()
