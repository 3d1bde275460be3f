"""Every integer setting read from the environment: what it accepts, and an error naming
the variable for what it does not (runtime/config.py)."""

import pytest

from fusegrad.runtime.config import Config, ConfigError

# variable -> (values it accepts, values it refuses)
INTEGER_SETTINGS = {
    "FUSEGRAD_DEBUG": (["0", "1", "2", "3", " 2 "], ["4", "7", "-1", "1" + "0" * 19]),
    "FUSEGRAD_THREADS": (["0", "1", "3", "1" + "0" * 19], ["-2", "two"]),
    "FUSEGRAD_COMPILE_WORKERS": (["0", "1", "4"], ["-1", "many"]),
    "FUSEGRAD_PROGRAM": (["0", "1"], ["2", "1" + "0" * 19]),
    "FUSEGRAD_PLAN_CACHE": (["0", "1", "100"], ["-5"]),
    "FUSEGRAD_KERNEL_CACHE": (["0", "64"], ["lots"]),
    "FUSEGRAD_RECOMPILE_WARNING": (["0", "5"], ["-1"]),
    "FUSEGRAD_CUDA_GRAPHS": (["0", "1"], ["2"]),
    "FUSEGRAD_AMX": (["0", "1"], ["3"]),
    "FUSEGRAD_DPBF16": (["0", "1"], ["10"]),
    "FUSEGRAD_AUTOTUNE": (["0", "1"], ["2"]),
    "FUSEGRAD_AUTOTUNE_BUDGET": (["0", "10", "1000000000"], ["1" + "0" * 400, "1.5"]),
    "FUSEGRAD_EMU_GUARD": (["0", "1", "2"], ["3"]),
    "FUSEGRAD_GC_FREEZE": (["0", "256", "100000"], ["-1", "many"]),
}
# not numbers in any setting: a sign, an underscore, hexadecimal, another script's digits,
# more digits than int() reads
NOT_NUMBERS = ["+1", "1_0", "0x1", "\u0663", "1" * 5000]


@pytest.mark.parametrize("name", sorted(INTEGER_SETTINGS))
def test_an_integer_setting_out_of_range_names_its_variable(monkeypatch, name):
    accepted, refused = INTEGER_SETTINGS[name]
    for raw in accepted:
        monkeypatch.setenv(name, raw)
        Config.from_env()
    for raw in refused + NOT_NUMBERS:
        monkeypatch.setenv(name, raw)
        with pytest.raises(ConfigError, match=f"^{name}=.* is not valid: expected "):
            Config.from_env()


def test_the_debug_level_is_read_as_given(monkeypatch):
    for level in range(4):
        monkeypatch.setenv("FUSEGRAD_DEBUG", str(level))
        assert Config.from_env().debug == level
