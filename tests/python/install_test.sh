#!/usr/bin/env bash
# pip install . into a fresh virtual environment (no torch there: the planner, simulator, CLI and
# Python module only), then the Python API's tests against the installed package, run from outside
# the checkout so that only the installed gpipe_plan can be imported.
#   bash tests/python/install_test.sh [VENV]   (default: a temporary folder, removed after)
set -euo pipefail
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${1:-$(mktemp -d)/venv}"
python3 -m venv "$venv"
started=$(date +%s)
"$venv/bin/pip" install --quiet --disable-pip-version-check "$source_dir"
echo "pip install . took $(( $(date +%s) - started )) s"
# The commands are on the environment's PATH and start without LibTorch.
test -x "$venv/bin/gpipe-plan"
"$venv/bin/gpipe-plan" --version
cd "$(mktemp -d)"
"$venv/bin/python" -c "import gpipe_plan, os; print('gpipe_plan from', os.path.dirname(gpipe_plan.__file__))"
"$venv/bin/python" "$source_dir/tests/python/api_test.py" "$venv/bin/gpipe-plan"
