"""Which tests carry the suite's markers `slow`, `emulator`, `nvcc`, `mpi` and `torch`
(registered in pyproject.toml; docs/TESTING.md says what each leaves out). They are given
here, at collection, by folder, file, fixture and what the test's code reads, so that a new
test in a marked place is marked without a decorator of its own:

- `mpi`: everything under tests/distributed/ (it starts ranks with mpiexec; tests/test_doctests.py
  marks its examples that start a process group itself);
- `nvcc`: a test skipped where nvcc is missing (a skipif whose reason names nvcc), or one
  that takes a fixture compiling with nvcc (`NVCC_FIXTURES`);
- `emulator`: a test that takes the `emulated` fixture (tests/_emulated.py), runs on the
  cuda backend's emulator through the `backend` fixture, reads the emulator's entry points
  (`EMULATOR_NAMES`, in its code, a fixture or a helper of the tests), or lives in a file
  whose tests all run kernels there (`EMULATOR_FILES`). The emulator's own unit tests
  (`EMULATOR_UNIT_TESTS`) are not marked: `--quick` keeps them;
- `torch`: a test whose code, or a helper of the tests that it calls, reads `torch`
  (`import torch`, `pytest.importorskip("torch")`, a module's `torch = None` fallback);
- `slow`: the tests in `SLOW` and `SLOW_PARAMETRIZATIONS`, measured with `--durations`
  (2 seconds or more each on 2 cores, or a sweep of many);
- `exhaustive`: the parametrizations in `EXHAUSTIVE_PARAMETRIZATIONS`, which
  tests/conftest.py deselects unless `--exhaustive` is given.

A test may also carry any of them as a decorator (`@pytest.mark.slow`).
tests/test_test_layout.py checks these rules.
"""

from __future__ import annotations

import functools
import sys
import types
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MARKERS = ("slow", "emulator", "nvcc", "mpi", "torch", "exhaustive")

MPI_FOLDERS = ("distributed",)
NVCC_FIXTURES = frozenset({"conv_ptx", "sgemm_ptx", "ptx"})
EMULATOR_FILES = frozenset(
    {
        "pipeline/test_cuda_emulated.py",  # every kernel class against the CPU's
        "pipeline/test_cuda_mma.py",  # the tensor-core helpers lane by lane
    }
)

# the emulator's own unit tests: never marked `emulator`, so that --quick runs them
EMULATOR_UNIT_TESTS = frozenset({"runtime/test_cuda_emulator.py"})

# 2 seconds or more with --durations on the loaded 2-core machine, all its parametrizations
# together (the file, or file::test for every parametrization of that test)
SLOW = frozenset(
    {
        "pipeline/test_cuda.py::test_kernels_compile_to_ptx_entries",
        "pipeline/test_cuda_wgmma.py::test_nvcc_builds_the_pipeline_for_sm_90a_and_leaves_it_out_for_sm_90",
        "pipeline/test_tiles.py::test_a_convolutions_images_go_outside_its_column_tiles",
        "pipeline/test_gather.py::test_gather_and_scatter_add_match_the_reference",
        "examples/test_lenet_amp.py",
        "examples/test_progress.py::test_every_example_takes_no_progress",
        "runtime/test_engine.py::test_a_100000_term_chain_and_its_gradient",
        "runtime/test_memory.py::test_an_mlp_over_160_batch_sizes_keeps_memory_flat",
        "runtime/test_memory.py::test_compiling_2000_new_kernels_keeps_rss_flat",
        "runtime/test_memory.py::test_rss_stays_flat_over_distinct_shapes_once_compiled",
        "runtime/test_interrupt.py::test_ctrl_c_stops_a_program_of_many_medium_kernels",
        "runtime/test_interrupt.py::test_ctrl_c_stops_a_long_kernel_and_the_engine_goes_on",
        "runtime/test_interrupt.py::test_ctrl_c_stops_a_slow_kernel_of_few_iterations",
        "runtime/test_interrupt.py::test_ctrl_c_stops_a_kernel_whose_rows_are_long",
        "runtime/test_fork.py::test_compiling_beside_a_thread_in_numpy_matmuls_never_blocks_them",
        "runtime/test_fork.py::test_forks_while_threads_compile_and_run_leave_no_child_hung",
        "runtime/test_cache.py::test_a_damaged_cache_file_is_never_used",
        "runtime/test_launch_list.py::test_the_host_cost_benchmark_runs_in_smoke_mode",
        "runtime/test_launch.py::test_dumps_are_written_once_per_schedule_and_identical_across_runs",
        "pipeline/test_cuda_sgemm.py::test_sgemm_ptx",
        "frontend/test_gamma_functions.py::test_ndtri_inverts_the_normal_cdf_in_both_tails",
        "frontend/test_gamma_functions.py::test_bessel_gradients_are_torchs_rules",
        "frontend/test_memory_peaks.py::test_an_op_peaks_at_its_output_and_one_input",
        "frontend/test_jit.py::test_random_models_replay_exactly_as_they_run_eagerly",
        "frontend/test_autodiff_random.py::test_the_generator_draws_every_op",
        "frontend/test_autodiff_random.py::test_random_conv_and_pool_gradients",
        "frontend/test_autodiff_random.py::test_random_graph_gradients",
        "frontend/test_serialization.py::test_concurrent_saves_to_one_path_never_show_a_partial_file",
        "frontend/test_numerics_reductions.py::test_sum_of_2_24_uniform_values_within_one_ulp",
        "frontend/test_differential.py::test_mixed_graphs",
        "ir/test_macro.py::test_a_chain_of_five_thousand_macros_expands_and_differentiates",
        "ir/test_node.py::test_deaths_inside_a_collection_whose_finalizers_build_nodes",
        "nn/test_conv.py::test_conv_at_16_lane_row_widths_values_and_gradients",
        "nn/test_conv.py::test_an_input_gradient_over_many_channels_is_summed_in_blocks",
        "nn/test_rnn.py::test_a_direction_is_one_macro_node_with_the_composed_values",
        "nn/test_padding_upsample.py::test_strided_conv_transpose_by_phases_values_and_gradients",
        # and with an empty compile cache (FUSEGRAD_CACHE, as on a fresh machine)
        "pipeline/test_cuda.py::test_float32_kernels_do_not_compute_in_double",
        "pipeline/test_amx.py::test_blocked_loops_cover_every_block_once",
        "pipeline/test_amx.py::test_b_steps_are_padded_to_an_odd_multiple_of_2_kib",
        "pipeline/test_cuda_memory.py::test_vector_paths_are_taken_exactly_where_the_layout_allows",
        "frontend/test_differential.py::test_reduction_graphs",
        "frontend/test_differential.py::test_elementwise_graphs",
        "frontend/test_differential.py::test_view_graphs",
        "frontend/test_differential.py::test_matmul_graphs",
        "frontend/test_half_programs.py::test_random_programs_in_16_bits",
        "frontend/test_memory_peaks.py::test_an_op_keeps_nothing_once_its_tensors_are_gone",
        "pipeline/test_schedule_at_source.py::test_lenet_gradients_are_the_same_bits",
        "nn/test_conv.py::test_strided_conv_values_and_gradients",
        "nn/test_conv.py::test_pool2d_matches_numpy",
        "nn/test_conv.py::test_conv_weight_gradient_in_image_chunks",
        "nn/test_conv.py::test_conv_own_gradient_equals_the_derived_one",
        "nn/test_conv.py::test_strided_conv_in_16_bit_storage_reads_windows_in_place",
        "nn/test_conv.py::test_conv_tiles_merged_rows_at_special_values",
        "nn/test_conv.py::test_a_strided_transposed_convolution_is_one_macro_node_with_the_composed_values",
        "nn/test_conv.py::test_a_strided_weight_gradient_takes_the_output_channels_as_lanes",
        "nn/test_conv.py::test_strided_conv_gradients_are_differentiable_again",
        "nn/test_depthwise_conv.py::test_depthwise_values_and_gradients_in_float32",
        "nn/test_padding_upsample.py::test_max_pool2d_ceil_mode_and_indices",
        "nn/test_rnn.py::test_packed_unsorted_bidirectional_lstm",
        "nn/test_rnn.py::test_bidirectional_two_layer_batch_first_lstm_values_and_gradients",
        "runtime/test_cache.py::test_processes_filling_an_empty_cache_at_once_all_succeed",
        "runtime/test_engine.py::test_memory_stays_flat_over_500_eager_lenet_steps",
        # ... and so that `--quick` with an empty cache stays under 5 minutes on 2 cores:
        # the acceptance programs but the MNIST CNN
        # (each a fresh `python -m fusegrad` process), a program the shim runs, and the
        # slowest parametrizations of the convolution and char transformer tests
        "programs/test_programs.py::test_vae_on_mnist_writes_its_reconstructions",
        "programs/test_programs.py::test_dcgan_on_fake_data_with_a_detached_fake_batch",
        "programs/test_programs.py::test_sngan_with_hook_based_spectral_norm_and_weight_norm_parametrizations",
        "programs/test_programs.py::test_lstm_cells_with_lbfgs_on_sine_waves",
        "programs/test_programs.py::test_character_model_with_an_endless_random_sampler",
        "programs/test_programs.py::test_character_model_samples_words",
        "programs/test_programs.py::test_nanogpt_style_trainer_with_autocast_scaler_and_accumulation",
        "frontend/test_torch_shim.py::test_pytorch_examples_mnist_with_adadelta_and_steplr_runs",
        "nn/test_conv.py::test_conv_matches_numpy_values_and_gradients",
        "examples/test_char_transformer.py::test_loss_falls_and_a_sample_is_drawn",
    }
)
# file::test -> a part of the parametrization's id that makes it slow: the special-points
# sweep's float64 cases (1,800 of them, 0.06 s each) are slow, its float32 ones are not
SLOW_PARAMETRIZATIONS = {"frontend/test_special_points.py::test_special_points": "-float64-"}
# ... and exhaustive: deselected unless --exhaustive (tests/conftest.py), so that the whole
# suite stays within CI's 15 minutes; the float32 cases of every op run always
EXHAUSTIVE_PARAMETRIZATIONS = {"frontend/test_special_points.py::test_special_points": "-float64-"}


def apply_markers(items) -> None:
    """Add the markers each collected test earns by where it lives and what it uses."""
    for item in items:
        for name in markers_of(item):
            item.add_marker(name)


def markers_of(item) -> set[str]:
    """The names among MARKERS that `item` earns (besides its own decorators)."""
    path = Path(item.path).resolve()
    try:
        where = path.relative_to(TESTS).as_posix()
    except ValueError:  # a test file outside tests/ (pytest given another folder)
        return set()
    test = where + "::" + getattr(item, "originalname", item.name)
    fixtures = set(getattr(item, "fixturenames", ()))
    found = set()
    if where.split("/")[0] in MPI_FOLDERS:
        found.add("mpi")
    if fixtures & NVCC_FIXTURES or any(
        "nvcc" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")
    ):
        found.add("nvcc")
    function = getattr(item, "function", None)
    if where in EMULATOR_UNIT_TESTS:
        pass
    elif (
        "emulated" in fixtures
        or where in EMULATOR_FILES
        or _on_an_emulated_backend(item)
        or any(reads(f, EMULATOR_NAMES) for f in [function, *_fixture_functions(item)] if f)
    ):
        found.add("emulator")
    part = SLOW_PARAMETRIZATIONS.get(test)
    if where in SLOW or test in SLOW or (part is not None and part in item.name):
        found.add("slow")
    part = EXHAUSTIVE_PARAMETRIZATIONS.get(test)
    if part is not None and part in item.name:
        found.add("exhaustive")
    if function is not None and reads_torch(function):
        found.add("torch")
    return found


def _fixture_functions(item) -> list:
    """The functions of the fixtures `item` takes that are defined under tests/ (a fixture
    that compiles for the emulator puts every test taking it on the emulator)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    functions = [d.func for defs in info.name2fixturedefs.values() for d in defs]
    return [f for f in functions if isinstance(f, types.FunctionType) and _is_a_test_helper(f)]


def _on_an_emulated_backend(item) -> bool:
    spec = getattr(item, "callspec", None)
    name = spec.params.get("backend") if spec is not None else None
    if name is None:
        return False
    from fusegrad.runtime.backend import get_backend

    return not get_backend(name).is_host


# names a test's code reads when it runs kernels on the emulator without the fixture
EMULATOR_NAMES = frozenset({"EmulatedModule", "EMULATED", "emulate"})


def reads_torch(function) -> bool:
    """Whether `function` (or a helper of the tests that it calls) reads `torch`:
    a cross-check with PyTorch that runs only where torch is installed."""
    return reads(function, {"torch"})


def reads(function, names) -> bool:
    """Whether `function`, a function nested in it, or a function of a test file that it
    calls reads a variable, module or attribute among `names`."""
    return _reads(function, frozenset(names))


@functools.cache  # (once per test function, not per parametrization)
def _reads(function, names: frozenset) -> bool:
    module = sys.modules.get(function.__module__)
    return _code_reads(function.__code__, module, names, helpers=2)


def _code_reads(code: types.CodeType, module, names: frozenset, helpers: int) -> bool:
    if names & set(code.co_names) or names & set(code.co_varnames):
        return True
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and _code_reads(const, module, names, helpers):
            return True
    if helpers and module is not None:
        for name in code.co_names:
            helper = getattr(module, name, None)
            if isinstance(helper, types.FunctionType) and _is_a_test_helper(helper):
                home = sys.modules.get(helper.__module__)
                if _code_reads(helper.__code__, home, names, helpers - 1):
                    return True
    return False


def _is_a_test_helper(function) -> bool:
    """A function defined in a file under tests/ (not fusegrad's, numpy's or pytest's, nor
    this file's: its summary imports torch to see whether it is there)."""
    path = Path(function.__code__.co_filename).resolve()
    return path.is_relative_to(TESTS) and path != Path(__file__).resolve()


def torch_line(stats) -> str | None:
    """What the summary says when torch is missing, as it says when nvcc or MPI is: the
    cross-checks skipped for it, and the tests that ran their own oracle without comparing
    with torch. None where torch is installed or no such test ran. `stats` is the terminal
    reporter's."""
    if _torch_installed():
        return None
    marked = [r for key in ("passed", "failed", "skipped") for r in stats.get(key, [])]
    marked = [r for r in marked if "torch" in r.keywords]
    skipped = {r.nodeid for r in marked if r.skipped and "torch" in _skip_reason(r).lower()}
    ran = {r.nodeid for r in marked if r.when == "call" and not r.skipped} - skipped
    if not skipped and not ran:
        return None
    return (
        f"torch cross-checks NOT run: torch is not installed ({len(skipped)} skipped, "
        f"{len(ran)} more ran without their comparison with torch)"
    )


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else ""


def _torch_installed() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True
