"""specmesh: distributed, lossless speculative decoding.

`from specmesh import Engine` loads the in-process engine lazily, so that light modules such as
`specmesh.client` never import torch.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("Engine", "Generation"):
        from specmesh import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'specmesh' has no attribute {name!r}")


__all__ = ["Engine", "Generation", "__version__"]
