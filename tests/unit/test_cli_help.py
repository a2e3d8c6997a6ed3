"""`specmesh COMMAND --help` says what the command does (specmesh/cli.py)."""

import argparse

import pytest

from specmesh.cli import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_command_is_listed_with_a_summary():
    assert set(_commands()) == {"fetch-model", "generate", "up", "serve", "demo", "train-eagle", "bench", "bench-load"}


@pytest.mark.parametrize("name", sorted(_commands()))
def test_each_commands_help_opens_with_its_summary(name, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([name, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert _commands()[name].description and _commands()[name].description.split()[0] in text.split("\n\n")[1]
