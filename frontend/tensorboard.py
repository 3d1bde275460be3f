"""TensorBoard event files: `SummaryWriter`, as torch.utils.tensorboard's, for scalars,
groups of scalars, histograms and text.

`python -m fusegrad` answers `from torch.utils.tensorboard import SummaryWriter` with this
class (makemore logs its losses so). It writes the files TensorBoard reads, without
TensorBoard or protobuf installed: each file is a TFRecord stream (a record is its length
as 8 bytes, a masked CRC-32C of those, the bytes, a masked CRC-32C of them) of `Event`
messages (tensorflow/core/util/event.proto), encoded here field by field. The first
record of a file says its version ("brain.Event:2"); then one event per call, with the
step (`global_step`, 0 if None) and the wall time (`walltime`, else now).

What goes into a value is torch's writer's: `add_scalar` a `simple_value` (or, with
`new_style`, a one-element tensor of the "scalars" plugin); `add_scalars` one writer per
tag in `log_dir/<main tag>_<tag>`, each value tagged with the main tag; `add_histogram`
numpy's histogram of the values (`bins`: numpy's, or "tensorflow", the buckets growing by
1.1 from 1e-12 to 1e20 each side of 0) trimmed to the buckets with values and one empty
bucket left of them, each bucket named by its right edge; `add_text` a string tensor of
the "text" plugin tagged `<tag>/text_summary`.

Events are written when `max_queue` are waiting, when `flush_secs` have passed at an
`add_*` call, at `flush()`, `close()` and the program's exit (torch's writer flushes on a
thread of its own; this one only when called). torch's other `add_*` methods (images,
graphs, embeddings, audio, video, meshes, hyperparameters, PR curves) raise an
AttributeError naming them.

>>> import tempfile, os
>>> with tempfile.TemporaryDirectory() as d:
...     with SummaryWriter(d) as w:
...         w.add_scalar("loss", 0.5, 1)
...     [name.startswith("events.out.tfevents.") for name in os.listdir(d)]
[True]
"""

from __future__ import annotations

import atexit
import itertools
import os
import socket
import struct
import time
import weakref
from datetime import datetime

import numpy as np

__all__ = ["SummaryWriter"]

FILE_VERSION = "brain.Event:2"
_uid = itertools.count()  # a number per event file this process opens (its name's last part)
_open_files: weakref.WeakSet = weakref.WeakSet()  # flushed at exit


# ---------------------------------------------------------------- CRC-32C (Castagnoli)


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """The CRC-32C of `data` (polynomial 0x1EDC6F41, reflected), as TFRecord uses.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC: the CRC-32C rotated right by 15 bits, plus a constant."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, the data's masked CRC."""
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


# ---------------------------------------------------------------- protobuf fields


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # (a negative int64 is its two's complement, ten bytes)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, n: int) -> bytes:
    return _tag(field, 0) + _varint(int(n))


def _plain_double(field: int, x: float) -> bytes:
    """A double outside a oneof: proto3 leaves out its default, +0.0 (not -0.0)."""
    data = struct.pack("<d", x)
    return b"" if data == bytes(8) else _tag(field, 1) + data


def _float(field: int, x: float) -> bytes:
    return _tag(field, 5) + struct.pack("<f", x)


def _bytes(field: int, data: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(data)) + data


def _doubles(field: int, xs) -> bytes:  # a packed repeated double
    return _bytes(field, struct.pack(f"<{len(xs)}d", *xs))


# Event (tensorflow/core/util/event.proto) and the summary messages inside it
_EVENT_WALL_TIME, _EVENT_STEP, _EVENT_FILE_VERSION, _EVENT_SUMMARY = 1, 2, 3, 5
_EVENT_SESSION_LOG, _EVENT_SOURCE = 7, 10
WRITER = b"fusegrad.tensorboard"  # the first event's source_metadata.writer
_SESSION_START = 1
_DT_FLOAT, _DT_DOUBLE, _DT_STRING = 1, 2, 7


def _event(wall_time: float, step: int, body: bytes) -> bytes:
    step_field = _int(_EVENT_STEP, step) if step else b""  # (proto3: 0 is not written)
    return _plain_double(_EVENT_WALL_TIME, wall_time) + step_field + body


def _value(tag: str, body: bytes, plugin: str | None = None) -> bytes:
    """A Summary.Value of `tag` (field 1) with `body` (its value's field), and the
    metadata naming its plugin (field 9: plugin_data, whose plugin_name is field 1)."""
    meta = _bytes(9, _bytes(1, _bytes(1, plugin.encode()))) if plugin else b""
    return _bytes(1, tag.encode()) + body + meta  # (fields in their numbers' order)


def _summary(*values: bytes) -> bytes:
    return _bytes(_EVENT_SUMMARY, b"".join(_bytes(1, v) for v in values))


# ---------------------------------------------------------------- values


def _array(values, what: str) -> np.ndarray:
    """`values` (a tensor of fusegrad's or torch's, an array, a number, a list) as a
    numpy array; a 16-bit float numpy lacks is read as float32."""
    if hasattr(values, "detach"):
        values = values.detach()
        if getattr(values.dtype, "name", "") == "bfloat16" or str(values.dtype).endswith(
            "bfloat16"
        ):
            values = values.float()
        values = values.cpu().numpy()
    a = np.asarray(values)
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise TypeError(f"{what}: expects numbers, got an array of {a.dtype}")
    return a


def _one_number(value, what: str) -> float:
    a = _array(value, what).squeeze()
    if a.ndim != 0:
        # torch's own check and error type
        raise AssertionError(
            f"{what}: Tensor should contain one element (0 dimensions). Was given size: "
            f"{a.size} and {a.ndim} dimensions."
        )
    return float(a)


def tensorflow_bins() -> list[float]:
    """TensorBoard's default histogram bucket edges: 1e-12 growing by 1.1 while below
    1e20, mirrored below 0, with 0 between."""
    up, v = [], 1e-12
    while v < 1e20:
        up.append(v)
        v *= 1.1
    return [-x for x in reversed(up)] + [0.0] + up


_TENSORFLOW_BINS: list[float] | None = None


def histogram(values: np.ndarray, bins, max_bins: int | None = None) -> bytes:
    """A HistogramProto of `values`: min (1), max (2), count (3), sum (4), sum of squares
    (5), the buckets' right edges (6) and counts (7), from the first bucket holding a value
    to the last, with one empty bucket before them (TensorBoard draws a bucket from the
    previous edge)."""
    global _TENSORFLOW_BINS
    # (in the values' own dtype, as torch's writer counts and sums them)
    values = values.reshape(-1)
    if values.dtype.kind == "b":
        values = values.astype(np.uint8)
    if values.size == 0:
        raise ValueError("add_histogram: the input has no element")
    if not np.isfinite(values).all():
        raise ValueError("add_histogram: the values hold NaN or infinity (numpy bins none)")
    if isinstance(bins, str) and bins == "tensorflow":
        if _TENSORFLOW_BINS is None:
            _TENSORFLOW_BINS = tensorflow_bins()
        bins = _TENSORFLOW_BINS
    counts, edges = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:  # every `group` buckets as one
        group = len(counts) // max_bins
        pad = -len(counts) % group
        counts = np.pad(counts, (0, pad)).reshape(-1, group).sum(1)
        edges = np.append(edges[:-1:group], edges[-1])
    held = np.flatnonzero(counts)
    if held.size == 0:  # values outside every bucket (explicit bins): none counted
        raise ValueError("add_histogram: no value falls inside the bins")
    first, last = int(held[0]), int(held[-1])
    if first > 0:
        counts, limits = counts[first - 1 : last + 1], edges[first : last + 2]
    else:
        counts, limits = np.concatenate([[0], counts[: last + 1]]), edges[: last + 2]
    return (
        _plain_double(1, float(values.min()))
        + _plain_double(2, float(values.max()))
        + _plain_double(3, float(values.size))
        + _plain_double(4, float(values.sum()))
        + _plain_double(5, float(values.dot(values)))
        + _doubles(6, [float(x) for x in limits])
        + _doubles(7, [float(x) for x in counts])
    )


# ---------------------------------------------------------------- files


class _EventFile:
    """One event file in `log_dir`, its records kept until `max_queue` wait or
    `flush_secs` have passed since the last write."""

    def __init__(self, log_dir: str, max_queue: int, flush_secs: float, suffix: str):
        os.makedirs(log_dir, exist_ok=True)
        stamp, host, uid = int(time.time()), socket.gethostname(), next(_uid)
        name = f"events.out.tfevents.{stamp:010d}.{host}.{os.getpid()}.{uid}{suffix}"
        self.path = os.path.join(log_dir, name)
        self.file = open(self.path, "wb")  # noqa: SIM115 (open until `close`)
        self.max_queue, self.flush_secs = max(int(max_queue), 1), flush_secs
        self.waiting: list[bytes] = []
        self.last = time.monotonic()
        version = _bytes(_EVENT_FILE_VERSION, FILE_VERSION.encode())
        self.add(_event(time.time(), 0, version + _bytes(_EVENT_SOURCE, _bytes(1, WRITER))))
        self.flush()  # (a file TensorBoard finds, from the start)
        _open_files.add(self)

    def add(self, event: bytes) -> None:
        if self.file is None:
            raise ValueError(f"the event file {self.path} is closed")
        self.waiting.append(record(event))
        if len(self.waiting) >= self.max_queue or time.monotonic() - self.last > self.flush_secs:
            self.flush()

    def flush(self) -> None:
        if self.file is None:
            return
        if self.waiting:
            self.file.write(b"".join(self.waiting))
            self.waiting.clear()
        self.file.flush()
        self.last = time.monotonic()

    def close(self) -> None:
        if self.file is not None:
            self.flush()
            self.file.close()
            self.file = None


@atexit.register
def _flush_all() -> None:
    for f in list(_open_files):
        f.flush()


# the add_* methods of torch's writer this one lacks: an error naming them, not a typo's
_TORCH_ONLY = frozenset(
    {
        "add_audio", "add_custom_scalars", "add_custom_scalars_marginchart",
        "add_custom_scalars_multilinechart", "add_embedding", "add_figure", "add_graph",
        "add_histogram_raw", "add_hparams", "add_image", "add_image_with_boxes",
        "add_images", "add_mesh", "add_onnx_graph", "add_pr_curve", "add_pr_curve_raw",
        "add_tensor", "add_video",
    }
)  # fmt: skip


class SummaryWriter:
    """Writes TensorBoard event files into `log_dir` (default
    `runs/<Mon><day>_<hh>-<mm>-<ss>_<host><comment>`), as torch.utils.tensorboard's
    SummaryWriter: `add_scalar`, `add_scalars`, `add_histogram`, `add_text`, `flush`,
    `close`, and use as a context manager. `purge_step`: TensorBoard drops the events
    of earlier files from that step on (a run resumed from a checkpoint)."""

    def __init__(
        self,
        log_dir=None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: float = 120,
        filename_suffix: str = "",
    ):
        if not log_dir:
            now = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{now}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self.max_queue, self.flush_secs, self.filename_suffix = (
            max_queue,
            flush_secs,
            filename_suffix,
        )
        self.file_writer: _EventFile | None = None
        self.all_writers: dict[str, _EventFile] = {}
        self._file()

    def _file(self) -> _EventFile:
        """The event file of `log_dir`, opened again after `close`."""
        if self.file_writer is None:
            f = _EventFile(self.log_dir, self.max_queue, self.flush_secs, self.filename_suffix)
            self.file_writer, self.all_writers = f, {self.log_dir: f}
            if self.purge_step is not None:
                step, now = self.purge_step, time.time()
                f.add(_event(now, step, _bytes(_EVENT_FILE_VERSION, FILE_VERSION.encode())))
                start = _bytes(_EVENT_SESSION_LOG, _int(1, _SESSION_START))
                f.add(_event(now, step, start))
                self.purge_step = None
        return self.file_writer

    def get_logdir(self) -> str:
        """The folder the event files are written in."""
        return self.log_dir

    def _write(self, f: _EventFile, value: bytes, step, walltime) -> None:
        wall = time.time() if walltime is None else float(walltime)
        f.add(_event(wall, 0 if step is None else int(step), _summary(value)))

    def add_scalar(
        self,
        tag: str,
        scalar_value,
        global_step: int | None = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
    ) -> None:
        """One number (a Python number, or a tensor or array of one element) under
        `tag` at step `global_step`."""
        x = _one_number(scalar_value, "add_scalar")
        if new_style:  # a one-element tensor of the "scalars" plugin
            if double_precision:
                tensor = _int(1, _DT_DOUBLE) + _doubles(6, [x])
            else:
                tensor = _int(1, _DT_FLOAT) + _bytes(5, struct.pack("<f", x))
            value = _value(tag, _bytes(8, tensor), plugin="scalars")
        else:
            value = _value(tag, _float(2, x))
        self._write(self._file(), value, global_step, walltime)

    def add_scalars(
        self,
        main_tag: str,
        tag_scalar_dict: dict,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """Several numbers on one chart: each tag's in a file of its own folder,
        `log_dir/<main_tag with / as _>_<tag>`, under `main_tag`."""
        wall = time.time() if walltime is None else walltime
        self._file()
        for tag, scalar in tag_scalar_dict.items():
            folder = os.path.join(self.log_dir, main_tag.replace("/", "_") + "_" + tag)
            f = self.all_writers.get(folder)
            if f is None:
                f = _EventFile(folder, self.max_queue, self.flush_secs, self.filename_suffix)
                self.all_writers[folder] = f
            x = _one_number(scalar, "add_scalars")
            self._write(f, _value(main_tag, _float(2, x)), global_step, wall)

    def add_histogram(
        self,
        tag: str,
        values,
        global_step: int | None = None,
        bins="tensorflow",
        walltime: float | None = None,
        max_bins: int | None = None,
    ) -> None:
        """The distribution of `values` (any shape) under `tag`: `bins` as numpy's
        (a count, edges or a rule's name) or "tensorflow", TensorBoard's default buckets."""
        histo = histogram(_array(values, "add_histogram"), bins, max_bins)
        self._write(self._file(), _value(tag, _bytes(5, histo)), global_step, walltime)

    def add_text(
        self,
        tag: str,
        text_string: str,
        global_step: int | None = None,
        walltime: float | None = None,
    ) -> None:
        """A text (markdown) under `<tag>/text_summary`, as TensorBoard's text plugin
        reads it."""
        shape = _bytes(2, _int(1, 1))  # TensorShapeProto: one dim of size 1
        tensor = _int(1, _DT_STRING) + _bytes(2, shape) + _bytes(8, str(text_string).encode())
        value = _value(f"{tag}/text_summary", _bytes(8, tensor), plugin="text")
        self._write(self._file(), value, global_step, walltime)

    def flush(self) -> None:
        """Write every waiting event to disk."""
        for f in self.all_writers.values():
            f.flush()

    def close(self) -> None:
        """Flush and close the event files (a later `add_*` opens a new one)."""
        for f in self.all_writers.values():
            f.close()
        self.file_writer, self.all_writers = None, {}

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str):
        if name in _TORCH_ONLY:
            raise AttributeError(
                f"SummaryWriter.{name} is not in fusegrad: its SummaryWriter writes scalars "
                "(add_scalar, add_scalars), histograms and text; see docs/TORCH_SCRIPTS.md"
            )
        raise AttributeError(f"'SummaryWriter' object has no attribute {name!r}")
