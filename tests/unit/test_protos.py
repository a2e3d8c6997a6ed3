"""The committed generated code is what `make protos` produces from protos/specmesh/v1."""

from pathlib import Path

from specmesh.codegen import ROOT, generate


def test_generated_code_is_up_to_date(tmp_path):
    fresh = {p.name: p.read_bytes() for p in generate(tmp_path)}
    committed = {p.name: p.read_bytes() for p in (ROOT / "specmesh" / "v1").iterdir() if p.is_file()}
    stale = sorted(name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name))
    assert not stale, f"run `make protos`: {stale} differ from protos/specmesh/v1"
