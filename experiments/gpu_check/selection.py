"""The GPU-sensitive tests: the named test selection that part (a) of `./dev.sh gpu-check`
runs, in one pytest process, in this order (the most telling first, so a run cut short has
run those).

Node ids at function level (every parametrisation runs). `tests/experiments/test_gpu.py`
checks that each names a test function that exists. On the CPU the `@pytest.mark.gpu` tests
are skipped with their reason; the dry run (`DRY`) runs the `test_gpu.py` ones only.
"""

__all__ = ["GROUPS", "ids", "group_of", "DRY_FILE"]

_GPU = "tests/experiments/test_gpu.py"
_LRU = "tests/lib/test_lru.py"
_SCAN = "tests/lib/test_scan.py"
_METHODS = "tests/lib/test_scan_methods.py"
_PALLAS = "tests/lib/test_pallas.py"

#: What each group checks -> its tests.
GROUPS: dict[str, tuple[str, ...]] = {
    "set-up (oracle comparisons at 'highest' precision, deterministic ops)": (
        f"{_GPU}::test_conftest_sets_highest_matmul_precision",
    ),
    "precision against the float64 oracles": (
        f"{_GPU}::test_default_precision_error_is_bounded",
        f"{_GPU}::test_forms_agree_under_default_precision",
        f"{_GPU}::test_highest_precision_option_overrides_a_tf32_default",
        f"{_LRU}::test_matches_oracle_float32",
        f"{_LRU}::test_highest_precision_matches_oracle",
        f"{_LRU}::test_step_equals_parallel_and_streaming",
        f"{_LRU}::test_matches_oracle_float64",
        f"{_METHODS}::test_bfloat16_compute_dtype_is_close_to_float32",
        f"{_METHODS}::test_bfloat16_step_equals_parallel_and_state_stays_float32",
        "tests/lib/test_ablation.py::test_stable_exp_plus_gamma_is_the_lru",
        "tests/lib/test_model.py::test_padding_invariance_inference",
    ),
    "determinism": (f"{_GPU}::test_grad_is_bit_exact_with_deterministic_ops",),
    "every scan method and algebra against the sequential loop": (
        f"{_SCAN}::test_matches_loop",
        f"{_METHODS}::test_forward_and_gradients_match_autodiff_of_loop",
        f"{_METHODS}::test_closed_form_backward_equals_generic_default",
        f"{_LRU}::test_gradients_equal_across_forms",
    ),
    "the Pallas kernel, forward and backward, against the loop and Associative": (
        f"{_PALLAS}::test_compiled_kernel_on_gpu",
        f"{_PALLAS}::test_compiled_fused_gradient_on_gpu",
        f"{_PALLAS}::test_layer_with_pallas_equals_default",
    ),
    "Auto's choice": (f"{_SCAN}::test_auto_method_and_vmap",),
    "the trainer's resume, bit-exact with deterministic ops": (
        "tests/experiments/test_lra_train.py::test_resume_after_stop_is_bit_exact",
    ),
}
#: The dry run's selection: the tests of this file in the selection.
DRY_FILE = _GPU


def ids(which: str = "all") -> list[str]:
    """The selection in order; `which="dry"`: only its tests in `DRY_FILE`."""
    every = [test for tests in GROUPS.values() for test in tests]
    return every if which == "all" else [t for t in every if t.startswith(DRY_FILE + "::")]


def group_of(nodeid: str) -> str:
    """The group of a collected test id (a parametrised id belongs to its function's)."""
    function = nodeid.split("[", 1)[0]
    for group, tests in GROUPS.items():
        if function in tests:
            return group
    return "other"
