#!/bin/sh
# A venv of its own for NVIDIA Dynamo's frontend and mocker engine (PyPI ai-dynamo 1.6.1), which
# tests/functional/test_knobs_dynamo_real.py runs on CPU. Not in the dev extras: ai-dynamo pins
# pydantic<=2.13.5 (the project's venv has a newer one), and its dependency aisimulate is a stub
# that downloads the real wheel from pypi.nvidia.com at install time. The frontend and the mocker
# need neither aisimulate, transformers nor kubernetes, so the wheels go in with --no-deps and
# only what they import is added.
# Usage: scripts/dynamo-venv.sh [DIR]   (default ~/.cache/gpuwatch/dynamo-venv; the tests look
# there, or at $GPUWATCH_DYNAMO_PYTHON)
set -eu
dir="${1:-$HOME/.cache/gpuwatch/dynamo-venv}"
python3 -m venv "$dir"
"$dir/bin/pip" install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
"$dir/bin/pip" install 'pydantic>=2.10.6,<=2.13.5' uvloop 'aiohttp>=3.14.3,<4' msgspec \
    'prometheus-client>=0.23.1,<1' pyzmq 'zstandard>=0.23,<1' packaging pyyaml
echo "dynamo venv ready: $dir/bin/python"
