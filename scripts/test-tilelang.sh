#!/usr/bin/env bash
# progcache.tilelang's tests against the real tilelang from PyPI, in their own
# virtual environment (.venv-tilelang): tilelang brings torch, TVM and the CUDA
# wheels (about 5.7 GB, 1.5 minutes to install on this project's machines),
# which the main test command (scripts/test.sh) does not install. Needs nvcc
# (the CUDA toolkit in /usr/local/cuda, or CUDA_HOME) and, for the Redis test,
# redis-server; a GPU only for the launch test, which skips without one.
set -euo pipefail
cd "$(dirname "$0")/.."
# The build dependencies of the progcache wheel (Debian packages), as the
# other commands install them.
bash scripts/setup.sh
venv=.venv-tilelang
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "tilelang>=0.1.15,<0.2" pytest
"$venv/bin/python" -m pip install -q --disable-pip-version-check ./
"$venv/bin/python" -m pytest -q python/tests/test_tilelang.py "$@"
# The docs' blocks that need tilelang, run as written (tests/doc_snippets.py).
python3 tests/doc_snippets.py --python "$PWD/$venv/bin/python" --only tilelang
