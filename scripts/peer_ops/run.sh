#!/usr/bin/env bash
# Run a peer framework's op test file (its test/test_ops.py, which you provide: nothing is
# fetched) against fusegrad through the name-only shim in shim/, and print the pass rate
# over the applicable tests. See README.md.
#
#   scripts/peer_ops/run.sh /path/to/test_ops.py [extra pytest args, e.g. -k "conv"]
set -euo pipefail
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 /path/to/test_ops.py [pytest args...]" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
test_file="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$test_file" "$work/test_ops.py"
cd "$work"
# CI=1: the suite prints no timings; the shim's plugin (peer_na) skips the tests listed
# as not applicable, with the reason
CI=1 PYTHONPATH="$here/shim${PYTHONPATH:+:$PYTHONPATH}" timeout "${PEER_TIMEOUT:-3600}" \
    "$python" -m pytest -q -p no:cacheprovider -p peer_na test_ops.py \
    --junitxml="$work/report.xml" -rf "$@" || true
"$python" "$here/summarize.py" "$work/report.xml"
