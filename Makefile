# specmesh: `make run` for a demo, `make test` for the whole suite. Both set everything up.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup model run test bench protos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned: 2.13.0 is the CPU build on local disk (anything else downloads GBs)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[model,test,bench]'
	touch $(STAMP)

setup: $(STAMP)

model: setup
	$(BIN)/specmesh fetch-model

run: model
	$(BIN)/specmesh demo

test: model
	$(BIN)/python -m pytest

bench: model
	$(BIN)/specmesh bench --dtype bfloat16
	$(BIN)/specmesh bench --dtype float32
	$(BIN)/specmesh bench --target distributed --dtype bfloat16 --prompts 6 --budgets 4,8 --drafters recycling,eagle,hybrid --stream-intervals 0,100
	$(BIN)/specmesh bench-load --rates 0.1,0.5,1.5,3 --interleaved-rates 0.1 --requests 10 --repeats 3 --max-output 96 --drafter hybrid

clean:
	rm -rf $(VENV) build *.egg-info

protos: setup
	$(BIN)/python -m specmesh.codegen
