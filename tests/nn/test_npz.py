"""Module.save / Module.load (`.npz`): a save that fails half way keeps the old file, and
a crafted archive (a zip bomb, an entry lying about its size) raises
fg.SerializationError before it is decompressed (issue 55, item 3)."""

from __future__ import annotations

import errno
import io
import os
import struct
import zipfile
import zlib

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

STORED, DEFLATED = 0, 8


def npy_header(shape, descr: str = "<f4") -> bytes:
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def zeros_deflated(n_mib: int) -> bytes:
    """A raw deflate stream of `n_mib` MiB of zeros, built without deflating them all:
    after a full flush the compressor starts afresh, so each MiB's block is the same."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = packer.compress(bytes(1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    assert packer.compress(bytes(1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH) == block
    return block * n_mib


def zip_archive(entries) -> bytes:
    """A zip of (name, declared size, crc, method, stored bytes) entries, each size and
    CRC as given, whatever the bytes are: what an attacker writes."""
    out, central = b"", b""
    for name, size, crc, method, stored in entries:
        n = name.encode()
        fields = (method, 0, 0, crc, len(stored), size, len(n))
        local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, *fields, 0) + n
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, *fields, 0, 0, 0, 0, 0, len(out)
        )
        central += n
        out += local + stored
    count = len(entries)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), len(out), 0)
    return out + central + end


def test_the_hand_made_zip_is_a_zip_numpy_reads(tmp_path):
    data = npy_header((2,)) + np.float32([1, 2]).tobytes()
    path = tmp_path / "ok.npz"
    path.write_bytes(zip_archive([("w.npy", len(data), zlib.crc32(data), STORED, data)]))
    with np.load(path) as archive:
        assert archive["w"].tolist() == [1.0, 2.0]
    assert nn.load(path)["w"].tolist() == [1.0, 2.0]


def test_a_zip_bomb_is_refused_before_it_is_decompressed(tmp_path, monkeypatch):
    """A 2 MB entry that inflates to 2 GiB of zeros for a weight of 8 numbers: refused on
    its declared size; nothing is decompressed (np.load inflated all of it)."""
    header = npy_header((1 << 28,), "<f8")
    stream = zlib.compressobj(9, zlib.DEFLATED, -15).compress(header) + zeros_deflated(2048)
    size = len(header) + (2 << 30)
    path = tmp_path / "bomb.npz"
    path.write_bytes(zip_archive([("weight.npy", size, 0, DEFLATED, stream + b"\x03\x00")]))
    assert path.stat().st_size < 4_000_000
    inflated = []
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: inflated.append(a) or 1 / 0)
    model = nn.Linear(4, 2)
    with pytest.raises(fg.SerializationError, match=r"'weight' declares 2147483776 bytes"):
        model.load(path)
    with pytest.raises(fg.SerializationError, match="more than 100 times its compressed size"):
        nn.load(path)
    assert inflated == []


def lying_entry(declared_shape, header_shape, extra_mib: int = 0):
    """An entry declaring (size and CRC) an npy of `declared_shape` float32, whose npy
    header says `header_shape`, holding the declared bytes (ones after the header) and
    `extra_mib` MiB of zeros after them, deflated."""
    header = npy_header(header_shape)
    size = len(npy_header(declared_shape)) + 4 * int(np.prod(declared_shape))
    body = header + np.ones(max(size - len(header), 0) // 4, np.float32).tobytes()
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = packer.compress(body) + packer.flush(zlib.Z_FULL_FLUSH) + zeros_deflated(extra_mib)
    return size, zlib.crc32(body), DEFLATED, stream + b"\x03\x00"


def test_an_entry_whose_header_declares_more_than_its_size_is_refused(tmp_path):
    path = tmp_path / "lie.npz"
    bias = npy_header((2,)) + bytes(8)
    weight = ("weight.npy", *lying_entry((2, 4), (1 << 26,)))
    path.write_bytes(zip_archive([weight, ("bias.npy", len(bias), zlib.crc32(bias), 0, bias)]))
    with pytest.raises(fg.SerializationError, match=r"'weight' declares 160 bytes, but its"):
        nn.Linear(4, 2).load(path)


def test_no_more_than_an_entrys_declared_bytes_are_inflated(tmp_path, monkeypatch):
    """An entry declaring a (2, 4) weight whose stream inflates to 64 MiB more: the weight
    loads, and the stream is inflated no further than the declared bytes and one read."""
    path = tmp_path / "long.npz"
    bias = npy_header((2,)) + bytes(8)
    weight = ("weight.npy", *lying_entry((2, 4), (2, 4), extra_mib=64))
    path.write_bytes(zip_archive([weight, ("bias.npy", len(bias), zlib.crc32(bias), 0, bias)]))
    inflated = []
    real = zlib.decompressobj

    class Counting:
        def __init__(self, *args):
            self.inner = real(*args)

        def decompress(self, data, max_length=0):
            out = self.inner.decompress(data, max_length)
            inflated.append(len(out))
            return out

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(zipfile.zlib, "decompressobj", Counting)
    model = nn.Linear(4, 2)
    model.load(path)
    assert model.weight.tolist() == [[1.0] * 4] * 2
    assert sum(inflated) < 1 << 20, f"{sum(inflated)} bytes inflated"


@pytest.mark.parametrize(
    "entry, says",
    [
        (npy_header((2, 4), "|O") + bytes(64), "dtype object, not a plain numeric dtype"),
        (npy_header((2, 4), "<c8") + bytes(64), "dtype complex64, not a plain numeric"),
        (npy_header((-2, -4)) + bytes(32), "negative dimension"),
        (b"\x93NUMPY\x03\x00" + bytes(60), "is .npy version"),
        (b"not an npy entry at all", "has no valid .npy header"),
        (npy_header((2, 4)) + bytes(31), "declares 159 bytes, but its header"),
    ],
)
def test_a_malformed_npy_entry_is_refused(tmp_path, entry, says):
    path = tmp_path / "bad.npz"
    path.write_bytes(zip_archive([("weight.npy", len(entry), zlib.crc32(entry), 0, entry)]))
    with pytest.raises(fg.SerializationError, match=says):
        nn.Linear(4, 2).load(path, strict=False)


def test_a_damaged_archive_is_refused(tmp_path):
    model = nn.Linear(4, 2)
    path = tmp_path / "net.npz"
    model.save(path)
    raw = path.read_bytes()
    for broken in (raw[: len(raw) // 2], b"PK" + bytes(100), raw.replace(b"weight", b"bias\0\0")):
        path.write_bytes(broken)
        with pytest.raises(fg.SerializationError, match="not a valid .npz checkpoint"):
            model.load(path)
    flipped = bytearray(raw)
    weight_npy = raw.index(b"\x93NUMPY", raw.index(b"weight.npy"))
    flipped[weight_npy + 128 + 4] ^= 0xFF  # the weight's data (after its header): its CRC fails
    path.write_bytes(bytes(flipped))
    with pytest.raises(fg.SerializationError, match="Bad CRC-32"):
        model.load(path)


def test_entries_the_module_has_no_place_for_are_named_not_read(tmp_path):
    model = nn.Linear(4, 2)
    bias = npy_header((2,)) + np.float32([5, 6]).tobytes()
    unknown = ("extra.npy", 2 << 30, 0, DEFLATED, zeros_deflated(4))  # never inflated
    path = tmp_path / "more.npz"
    path.write_bytes(zip_archive([("bias.npy", len(bias), zlib.crc32(bias), 0, bias), unknown]))
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*'extra'"):
        model.load(path)
    assert model.load(path, strict=False) == (["weight"], ["extra"])
    assert model.bias.tolist() == [5.0, 6.0]


def test_a_failed_module_save_keeps_the_old_file(tmp_path, monkeypatch):
    """The disk fills half way through the weights: the save raises, the old checkpoint
    loads as it was, and no temporary file stays (np.savez wrote over the old file)."""
    fg.manual_seed(0)
    old, new = nn.Linear(4, 2), nn.Linear(4, 2)
    path = tmp_path / "net.npz"
    old.save(path)
    real = np.lib.format.write_array

    def disk_full(fp, array, *args, **kwargs):
        buf = io.BytesIO()
        real(buf, array, *args, **kwargs)
        fp.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np.lib.format, "write_array", disk_full)
    with pytest.raises(OSError, match="No space left"):
        new.save(path)
    monkeypatch.undo()
    back = nn.Linear(4, 2)
    back.load(path)
    assert back.weight.tolist() == old.weight.tolist() != new.weight.tolist()
    assert [p.name for p in tmp_path.iterdir()] == ["net.npz"]


def test_file_objects_save_and_load_as_numpy_takes_them():
    model, back = nn.Linear(3, 2), nn.Linear(3, 2)
    buf = io.BytesIO()
    model.save(buf)
    buf.seek(0)
    back.load(buf)
    assert back.weight.tolist() == model.weight.tolist()
