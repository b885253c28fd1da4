# The two contract commands: `make demo` and `make test`. Both create .venv on first use and reuse it after.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Which tested set of versions (constraints/<set>.txt) this node gets: cpu, cu12 or cu13, from the NVIDIA
# driver that nvidia-smi reports (dali_stream/pairing.py). Override: make install SET=cu12.
SET ?= $(shell $(PYTHON) dali_stream/pairing.py constraint-set)
# Where torch's build for the set comes from. cu12: PyTorch's CUDA 12.8 index; cu13: PyPI (its Linux torch is
# a CUDA 13 build); cpu: PyPI or a local wheel (set TORCH_INDEX=https://download.pytorch.org/whl/cpu for the
# small CPU build on a machine with the internet).
TORCH_INDEX ?= $(if $(filter cu12,$(SET)),https://download.pytorch.org/whl/cu128,)
# Each set has the extra of its name: [cpu], [cu12], [cu13]; the cpu set adds [dali] (DALI's CPU operators: the
# suite tests DALI's CPU decoder and graph; the README's CPU line leaves it out).
COMMA := ,
EXTRAS := $(SET),remote,bench,docs,test$(if $(filter cpu,$(SET)),$(COMMA)dali,)
STAMP := $(VENV)/.installed-$(SET)
SUDO  := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_DIR ?= .demo/sample
PYTEST_ARGS ?=
# Test processes (pytest-xdist), each given whole files (a few long files' tests one at a time: tests/conftest.py
# `SPLIT`), the longest first (`LONG_FIRST`; xdist's own reordering by test count would start the longest file last).
# Three on 2 cores: two left a fifth of the cores idle (tests waiting on child processes, servers and timers) and ran
# the suite in ~22 minutes, three in ~20, one in ~31. Tests that bound a time leave room for that load (the remote
# tests' timeouts are 1 s). 0: one process.
PYTEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),-p no:xdist,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)
# The floors: setup.cfg's lowest allowed versions (constraints/floors.txt) in their own venv, on a smoke subset.
FLOORS_VENV := .venv-floors
# (the CLI's tests run the same loader in child processes: not repeated here)
SMOKE := tests/plan/test_plan.py tests/decode/test_routes.py tests/fetch/test_segments.py tests/loader/test_loader.py tests/source/test_remote.py \
         tests/source/test_hub.py tests/plan/test_mix_plan.py tests/loader/test_mixture.py tests/decode/test_depth.py tests/loader/test_text_columns.py \
         tests/loader/test_feature_shapes.py tests/loader/test_recorded_without_video.py tests/fetch/test_tables.py tests/decode/test_colour.py
# ... less the loader's process-lifecycle tests (exit, fork, finalizers, transform processes: ~87 s on 2 cores),
# which exercise CPython and torch's multiprocessing rather than the floors of the libraries pinned
SMOKE_SKIP := not transforms and not at_exit and not fork and not finalizer
NEWEST_VENV := .venv-newest
NEWEST_SMOKE := tests/tools/test_pairing.py tests/decode/test_routes.py tests/fetch/test_segments.py tests/loader/test_golden.py \
                tests/decode/test_colour.py tests/loader/test_lerobot_names.py

.PHONY: demo demo-mixture test lint typecheck docs test-floors test-newest install sysdeps clean gpu-check gpu-datasets test-lerobot \
	gpu-first-prepare gpu-first

demo: $(STAMP)
	$(BIN)/dali-stream demo $(DEMO_DIR)

# Two sample datasets of different embodiments streamed as one mixture (docs/mixtures.md).
demo-mixture: $(STAMP)
	$(BIN)/dali-stream demo .demo/mixture --mixture --batches 100

# --durations: the slowest tests named at the end of every run (CI's log too), where the suite's time goes
test: $(STAMP) lint typecheck docs
	$(BIN)/python -m pytest -q --timeout=600 --durations=15 $(XDIST) $(PYTEST_ARGS)

# The linter (ruff, settings in pyproject.toml [tool.ruff]): unused names, undefined ones, sorted imports. Part of
# `make test`, so CI runs it; `$(BIN)/ruff check --fix .` fixes most of what it finds.
lint: $(STAMP)
	$(BIN)/ruff check .

# The package's annotations, checked by mypy (settings in setup.cfg [mypy]); part of `make test`, so CI runs it.
typecheck: $(STAMP)
	$(BIN)/python -m mypy

# The reference documentation (docs/, mkdocs.yml) into .docs-site/; --strict fails on a link to a missing page or
# heading. Part of `make test`, so CI builds it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

install: $(STAMP)

# On a machine with an NVIDIA GPU: diagnose, the `gpu`-marked tests and a short GPU benchmark, results in
# benchmarks/results/<gpu-name>/ (see benchmarks/README.md, "GPU check"). Uses .venv when it exists, else
# python3 (an offline GPU node with the dependencies staged on PYTHONPATH); installs nothing.
gpu-check:
	bash benchmarks/gpu_check.sh

# The datasets gpu-check measures on (two 640x480 cameras, H.264 and AV1), written here on the CPU machine and
# carried to the GPU node with the tree (.demo/gpu-check-640x480-*): the GPU node then starts measuring at once.
gpu-datasets: $(STAMP)
	PY=$(BIN)/python bash benchmarks/gpu_datasets.sh

# Tier 1 of a GPU visit, in one call: NVDEC through the open-decoder engine without DALI or FFmpeg
# (benchmarks/gpu_first.py; the plan of a visit: benchmarks/README.md, "A GPU visit"). `gpu-first-prepare` runs
# here first (datasets, FFmpeg's reference pictures, the PyNvVideoCodec wheel; prints what a call carries);
# `gpu-first` runs on the GPU node, installs nothing but that wheel.
gpu-first-prepare: $(STAMP)
	$(BIN)/python benchmarks/gpu_first.py prepare

gpu-first:
	bash benchmarks/gpu_first.sh

# lerobot's ACT and Diffusion trained by `dali-stream train` on this machine's CPU, in an environment where lerobot
# 0.6.1 imports: LEROBOT_VENV when it holds one (any Python lerobot runs on), else a venv built here with
# `pip install 'lerobot[dataset,training,diffusion]==0.6.1'` (Python >= 3.12: LEROBOT_PYTHON=python3.12). The loader goes in as
# docs/install.md says, with the environment's versions held, and `pip check` must pass. Results in
# benchmarks/results/cpu-2core-lerobot-train/. For developers: lerobot is no dependency, CI does not run it.
LEROBOT_VENV ?= .venv-lerobot
LEROBOT_PYTHON ?= $(PYTHON)
test-lerobot: sysdeps
	@if ! $(LEROBOT_VENV)/bin/python -c 'import lerobot' 2>/dev/null; then \
		$(LEROBOT_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 12))' || { \
			echo "lerobot 0.6.1 needs Python >= 3.12: set LEROBOT_PYTHON=python3.12, or LEROBOT_VENV to an environment where lerobot imports"; exit 2; }; \
		$(LEROBOT_PYTHON) -m venv $(LEROBOT_VENV) && $(LEROBOT_VENV)/bin/pip install -q 'lerobot[dataset,training,diffusion]==0.6.1'; \
	fi
	$(LEROBOT_VENV)/bin/pip list --format=freeze | grep -v '^dali-stream==' > $(LEROBOT_VENV)/held.txt
	$(LEROBOT_VENV)/bin/pip install -q -c $(LEROBOT_VENV)/held.txt -e '.[dali]'
	$(LEROBOT_VENV)/bin/pip check
	$(LEROBOT_VENV)/bin/python benchmarks/lerobot_train.py --out benchmarks/results/cpu-2core-lerobot-train

# System packages, installed only when absent: FFmpeg's libraries (torchcodec loads them) and its command (the
# sample writer's encoder-defaults recorder runs libaom and two-pass VP9 through it) and, when running
# as root (CI), Debian's slurm-wlm for the real-SLURM test (tests/tools/test_slurm.py skips without it).
sysdeps:
	@need=""; \
	{ ldconfig -p 2>/dev/null || /sbin/ldconfig -p; } | grep -q 'libavcodec\.so' && command -v ffmpeg >/dev/null || need="ffmpeg"; \
	if [ "$$(id -u)" = 0 ] && ! command -v slurmctld >/dev/null; then need="$$need slurm-wlm"; fi; \
	if [ -n "$$need" ]; then \
		echo "installing system packages:$$need"; \
		$(SUDO) apt-get update -q && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$need; \
	fi

test: sysdeps

# The package through pip's resolver, held to the tested set for this node.
$(STAMP): Makefile setup.cfg pyproject.toml constraints/common.txt constraints/$(SET).txt | sysdeps
	@echo "installing dali-stream[$(EXTRAS)] with constraints/$(SET).txt$(if $(TORCH_INDEX), (torch from $(TORCH_INDEX)))"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -c constraints/$(SET).txt \
		-e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed*
	touch $@

test-floors: sysdeps
	test -x $(FLOORS_VENV)/bin/python || $(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/pip install -q -c constraints/floors.txt -e '.[cu12,remote,test]'
	$(FLOORS_VENV)/bin/pip freeze | grep -iE '^(numpy|pyarrow|fsspec|huggingface.hub|av|rich|aiohttp|s3fs|nvidia-dali-cuda120|torch|torchcodec)=='
	$(FLOORS_VENV)/bin/python -m pytest -q --timeout=600 $(XDIST) $(SMOKE) -k "$(SMOKE_SKIP)"

# The newest releases, a second tested set (constraints/newest.txt: torch 2.15 from PyPI, a CUDA 13 build, with
# torchcodec 0.17 and DALI's CUDA 13 flavour), in their own venv, on a smoke subset: decoding against the painted
# ids and FFmpeg's colours, the golden batches, routing and the version pairing. PIP_CONSTRAINT=/dev/null sets aside
# a machine-wide pip constraint where one caps torch below the set's (CI's machine has one); the set's own file
# still pins every version. Installed less triton and cuSOLVER (1.3 GB that no test loads), one heavy wheel at a
# time: constraints/lean_install.py says why.
test-newest: sysdeps
	test -x $(NEWEST_VENV)/bin/python || $(PYTHON) -m venv $(NEWEST_VENV)
	PIP_CONSTRAINT=/dev/null $(NEWEST_VENV)/bin/python constraints/lean_install.py --skip triton,nvidia-cusolver \
		-- -c constraints/newest.txt -e '.[cu13,remote,test]'
	$(NEWEST_VENV)/bin/pip freeze | grep -iE '^(torch|torchcodec|nvidia-dali-cuda130)=='
	$(NEWEST_VENV)/bin/python -m pytest -q --timeout=600 $(XDIST) $(NEWEST_SMOKE)

clean:
	rm -rf $(VENV) $(FLOORS_VENV) $(NEWEST_VENV) $(LEROBOT_VENV) .demo .docs-site *.egg-info
