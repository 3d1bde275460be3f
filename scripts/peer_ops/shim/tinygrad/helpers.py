"""Environment flags the peer suite reads; none changes what fusegrad computes."""

import contextlib
import os


def getenv(key: str, default=0):
    """The environment variable `key`, as the type of `default`."""
    return type(default)(os.getenv(key, default))


DEBUG = getenv("DEBUG")
CI = os.getenv("CI", "") != ""
IMAGE = CPU_LLVM = AMD_LLVM = EMULATE = 0


@contextlib.contextmanager
def Context(**kwargs):  # noqa: N802 -- the peer's spelling
    """Peer-specific compiler switches: fusegrad has none of them, so this sets nothing."""
    yield
