#!/usr/bin/env bash
# Set up ./.venv if needed, then run the whole test suite. Extra arguments go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec python -m pytest -q "$@"
