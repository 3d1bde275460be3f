"""The examples' progress bars (fusegrad.progress): drawn on a terminal, never in a
redirected log (where each redraw's carriage return would add a line), never with
`--no-progress`, which every example takes."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from fusegrad.progress import progress

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _is_script(name: str) -> bool:
    """A file the user runs (not a module the scripts import, as minitorch_ops.py)."""
    if not name.endswith(".py"):
        return False
    with open(os.path.join(EXAMPLES, name)) as f:
        return '__name__ == "__main__"' in f.read()


SCRIPTS = sorted(f for f in os.listdir(EXAMPLES) if _is_script(f))


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_drawn_on_a_terminal_only():
    tty = Terminal()
    assert list(progress(range(3), desc="epoch 1", file=tty, mininterval=0)) == [0, 1, 2]
    assert "\r" in tty.getvalue() and "epoch 1" in tty.getvalue()
    log = io.StringIO()  # a file or a pipe
    assert list(progress(range(3), desc="epoch 1", file=log)) == [0, 1, 2]
    assert log.getvalue() == ""


def test_no_progress_turns_it_off_even_on_a_terminal():
    tty = Terminal()
    bar = progress(total=5, file=tty, enabled=False)
    bar.update(2)  # a bar updated by hand: the same calls work when it is off
    bar.set_postfix(loss="0.1")
    bar.close()
    assert tty.getvalue() == ""


def test_lines_printed_through_the_bar_stay_lines_in_a_log():
    log = io.StringIO()
    bar = progress(range(2), file=log)
    for i in bar:
        bar.write(f"step {i}", file=log)
    assert log.getvalue() == "step 0\nstep 1\n"


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_example_takes_no_progress(script):
    done = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), "--help"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--no-progress" in done.stdout


def test_a_redirected_run_of_an_example_has_no_carriage_returns(tmp_path):
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        subprocess.run(
            [sys.executable, os.path.join(EXAMPLES, "toy_datasets.py"), "--epochs", "30"],
            stdout=out, stderr=subprocess.STDOUT, timeout=300, check=True,
        )  # fmt: skip
    text = log.read_text()
    assert "correct" in text or "xor" in text
    assert "\r" not in text
