#!/usr/bin/env bash
# progcache.torch's tests against the real torch from PyPI (python/tests/
# test_torch.py), in their own virtual environment (.venv-torch): torch brings
# Triton and the CUDA wheels (about 5.3 GB installed, about a minute to
# install on this project's machines). No GPU is needed: Inductor generates
# C++ for the CPU with the same FX graph and AOTAutograd caches. The Redis
# tests need redis-server (scripts/setup.sh installs it).
#
# Not run by scripts/test.sh (.ci/run): with torch's install and tests in it,
# the CI run took 61 to 68 minutes, over its 45. PROGCACHE_WHEEL=<a wheel>
# installs that wheel; without it, ./ is built and installed.
# Another tested torch (TESTED_TORCH in python/progcache/torch.py), in a venv
# of its own: TORCH_SPEC="torch==2.11.0" TORCH_VENV=.venv-torch211 bash scripts/test-torch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
venv=${TORCH_VENV:-.venv-torch}
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
py="$PWD/$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check "${TORCH_SPEC:-torch>=2.15,<2.16}" numpy pytest
if [[ -n "${PROGCACHE_WHEEL:-}" ]]; then
  "$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$PROGCACHE_WHEEL"
else
  "$py" -m pip install -q --disable-pip-version-check ./
fi
# From another directory, so that the installed package (with its autoload
# .pth, which turns PROGCACHE_TORCH on in Inductor's compile workers) is the
# one imported, not python/progcache.
(cd python/tests && "$py" -m pytest -q test_torch.py "$@")
# The docs' blocks that need torch, run as written (tests/doc_snippets.py).
python3 tests/doc_snippets.py --python "$py" --only torch
