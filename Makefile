# The two contract commands: `make demo` and `make test`. Both create .venv on first use and reuse it after.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The exact set tested on our CI machine kind (Debian, Python 3.11, CPU only). setup.cfg declares ranges.
PINS := torch==2.13.0 torchcodec==0.13.0 nvidia-dali-cuda120==2.4.0 av==18.1.0 pyarrow==26.0.1 \
        fsspec==2026.9.0 huggingface_hub==2.4.0 accelerate==1.15.0 numpy==2.4.6 rich==15.0.0 \
        aiohttp==3.14.5 s3fs==2026.9.0 psutil==7.2.2 matplotlib==3.11.2 pytest==9.2.0 pytest-timeout==2.4.0 \
        'moto[server]==5.2.5' boto3==1.43.117
STAMP := $(VENV)/.installed
SUDO  := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_DIR ?= .demo/sample
PYTEST_ARGS ?=

.PHONY: demo test install sysdeps clean gpu-check

demo: $(STAMP)
	$(BIN)/dali-stream demo $(DEMO_DIR)

test: $(STAMP)
	$(BIN)/python -m pytest -q --timeout=600 $(PYTEST_ARGS)

install: $(STAMP)

# On a machine with an NVIDIA GPU: diagnose, the `gpu`-marked tests and a short GPU benchmark, results in
# benchmarks/results/<gpu-name>/ (see benchmarks/README.md, "GPU check"). Uses .venv when it exists, else
# python3 (an offline GPU node with the dependencies staged on PYTHONPATH); installs nothing.
gpu-check:
	bash benchmarks/gpu_check.sh

# System packages, installed only when absent: FFmpeg's libraries (torchcodec loads them) and, when running
# as root (CI), Debian's slurm-wlm for the real-SLURM test (tests/test_slurm.py skips without it).
sysdeps:
	@need=""; \
	{ ldconfig -p 2>/dev/null || /sbin/ldconfig -p; } | grep -q 'libavcodec\.so' || need="ffmpeg"; \
	if [ "$$(id -u)" = 0 ] && ! command -v slurmctld >/dev/null; then need="$$need slurm-wlm"; fi; \
	if [ -n "$$need" ]; then \
		echo "installing system packages:$$need"; \
		$(SUDO) apt-get update -q && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$need; \
	fi

test: sysdeps

$(STAMP): Makefile setup.cfg pyproject.toml | sysdeps
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(PINS)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

clean:
	rm -rf $(VENV) .demo *.egg-info
