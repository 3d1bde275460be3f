"""What the compiler compiles is a kernel's code, not its name (`compiler.code_of`): kernels
that differ only in their names and comment headers are compiled once and share their
machine code, each keeping its own name and source for what reports it."""

from __future__ import annotations

import uuid

import numpy as np

import fusegrad as fg
from fusegrad.pipeline import compiler

# out[start] = end * scale: one store, so a run shows which code ran
BODY = """define void @{symbol}(i64 %start, i64 %end, ptr %out) {{
  %f = sitofp i64 %end to float
  %v = fmul float %f, {scale:e}
  %at = getelementptr inbounds float, ptr %out, i64 %start
  store float %v, ptr %at
  ret void
}}
"""


def _job(name: str, scale: float, header: str) -> tuple[str, str, int, int]:
    symbol = f"{name}_{uuid.uuid4().hex[:12]}"
    source = f"; kernel {name}\n;   {header}\n\n" + BODY.format(symbol=symbol, scale=scale)
    return source, symbol, 1, 3


def _run(kernel, end: int) -> float:
    out = np.zeros(1, np.float32)
    kernel.fn(0, end, out.ctypes.data)
    return float(out[0])


def test_kernels_that_differ_only_in_name_and_header_compile_once(tmp_path):
    scale = float(1 + uuid.uuid4().int % 100_000)  # code no other test compiled
    a = _job("e_16x20", scale, "output 16x20")
    b = _job("e_16x33", scale, "output 16x33")
    with fg.config.override(cache=str(tmp_path)):
        before = compiler.stats["compiled"]
        (ka,) = compiler.compile_kernels([a])
        (kb,) = compiler.compile_kernels([b])
    assert compiler.stats["compiled"] - before == 1
    assert (ka.cache, kb.cache) == ("compiled", "memory")
    assert ka.address == kb.address and ka.code_symbol == kb.code_symbol
    # each keeps its own name and source: records, dumps and profiles name it so
    assert (ka.symbol, kb.symbol) == (a[1], b[1])
    assert (ka.source, kb.source) == (a[0], b[0])
    assert f"@{a[1]}(" in ka.optimized_ir and f"@{b[1]}(" in kb.optimized_ir
    assert _run(kb, 40) == 40 * scale


def test_the_same_code_in_one_batch_is_compiled_once(tmp_path):
    scale = float(1 + uuid.uuid4().int % 100_000)
    jobs = [_job("e_4", scale, "output 4"), _job("e_9", scale, "output 9")]
    with fg.config.override(cache=str(tmp_path)):
        before = compiler.stats["compiled"]
        ka, kb = compiler.compile_kernels(jobs)
    assert compiler.stats["compiled"] - before == 1
    assert (ka.cache, kb.cache) == ("compiled", "memory") and ka.address == kb.address


def test_kernels_whose_code_differs_compile_apart(tmp_path):
    scale = float(1 + uuid.uuid4().int % 100_000)
    jobs = [_job("e_5", scale, "output 5"), _job("e_5", scale + 1.0, "output 5")]
    with fg.config.override(cache=str(tmp_path)):
        before = compiler.stats["compiled"]
        ka, kb = compiler.compile_kernels(jobs)
    assert compiler.stats["compiled"] - before == 2
    assert ka.code_symbol != kb.code_symbol and ka.address != kb.address
    assert (_run(ka, 8), _run(kb, 8)) == (8 * scale, 8 * (scale + 1.0))


def test_a_level_is_part_of_the_code():
    source, symbol, _, _ = _job("e_6", 1.5, "output 6")
    assert compiler.code_of(source, symbol, 3)[1] != compiler.code_of(source, symbol, 2)[1]
    code, code_symbol = compiler.code_of(source, symbol, 3)
    assert symbol not in code and f"@{code_symbol}(" in code and ";" not in code


def test_a_gather_over_a_new_number_of_rows_compiles_no_new_gather(tmp_path):
    """An embedding's gather over 16 x 20 and over 16 x 33 token ids is one code: the rows
    are the range of its parallel loop, an argument. The second length's gather is the
    first's machine code (cache "memory"), under its own name, and gathers right."""
    rng = np.random.default_rng(0)
    width = 37 + uuid.uuid4().int % 20  # rows of a width no other test gathers
    table = rng.standard_normal((211, width)).astype(np.float32)
    weight = fg.tensor(table)
    gathers = []
    with fg.config.override(cache=str(tmp_path)):
        for length in (20, 33):
            ids = rng.integers(0, 211, size=(16, length))
            out = fg.nn.functional.embedding(fg.tensor(ids), weight)
            records = out.realize().node.arg.kernels
            np.testing.assert_array_equal(out.numpy(), table[ids])
            (gather,) = [r for r in records if r.name.startswith("e_gather")]
            gathers.append(gather)
    first, second = gathers
    assert first.name.startswith("e_gather_16x20") and second.name.startswith("e_gather_16x33")
    assert first.compiled.code_symbol == second.compiled.code_symbol
    assert second.cache == "memory"


def _from_disk(tmp_path, monkeypatch, load_many):
    """Three kernels compiled, forgotten in memory, then asked for again in one batch with
    `Library.load_many` replaced by `load_many(original, library, items)`."""
    scales = [float(1 + uuid.uuid4().int % 100_000) + k for k in range(3)]
    original = compiler.Library.load_many
    monkeypatch.setattr(
        compiler.Library, "load_many", lambda lib, items: load_many(original, lib, items)
    )
    with fg.config.override(cache=str(tmp_path)):
        compiler.compile_kernels([_job(f"e_{k}", s, "output 1") for k, s in enumerate(scales)])
        compiler._memory.clear()  # (and none is loaded still: they come from disk now)
        with compiler.batch():
            kernels = compiler.compile_kernels(
                [_job(f"e_{k}", s, "output 1") for k, s in enumerate(scales)]
            )
    return scales, kernels


def test_object_files_found_on_disk_load_together(tmp_path, monkeypatch):
    """Kernels a batch finds on disk are added to its library together and resolved once
    (one by one, resolving cost three times what adding did)."""
    calls = []

    def counted(original, library, items):
        calls.append(len(items))
        return original(library, items)

    scales, kernels = _from_disk(tmp_path, monkeypatch, counted)
    assert calls[-1] == 3 and [k.cache for k in kernels] == ["disk"] * 3
    assert len({id(k.library) for k in kernels}) == 1
    assert [_run(k, 7) for k in kernels] == [7 * s for s in scales]


def test_object_files_that_do_not_load_together_load_one_by_one(tmp_path, monkeypatch):
    """Where loading them together fails, each is loaded alone (one that fails alone
    too is compiled): the kernels run right."""

    def failing(original, library, items):
        raise RuntimeError("an object that does not load")

    scales, kernels = _from_disk(tmp_path, monkeypatch, failing)
    assert [k.cache for k in kernels] == ["disk"] * 3
    assert [_run(k, 7) for k in kernels] == [7 * s for s in scales]
