"""`specmesh bench`'s settings are checked before any model loads (specmesh/benchmark/harness.py)."""

import pytest

from specmesh.benchmark.harness import BenchConfig


@pytest.mark.parametrize("settings, named", [
    (dict(drafters=("recycling", "bogus")), "drafters must be among .* got 'bogus'"),
    (dict(drafters=()), "drafters must be among"),
    (dict(datasets=("gsm8k",)), "datasets must be among mtbench, humaneval, got 'gsm8k'"),
    (dict(budgets=(4, 0)), "budgets must be > 0"),
    (dict(prompts=0), "prompts and max_new_tokens must be > 0"),
    (dict(stream_intervals=(-1,)), "stream intervals must be >= 0 ms"),
    (dict(target="cluster"), "target must be 'engine' or 'distributed'"),
])
def test_bad_settings_are_refused_naming_the_setting(settings, named):
    with pytest.raises(ValueError, match=named):
        BenchConfig(**settings)


def test_the_defaults_and_the_readme_command_are_accepted():
    BenchConfig()
    BenchConfig(target="distributed", prompts=6, budgets=(4, 8), drafters=("recycling", "eagle", "hybrid"))
