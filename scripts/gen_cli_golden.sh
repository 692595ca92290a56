#!/usr/bin/env bash
# Rewrites the golden CLI documents, tests/data/golden/cli/NAME.json.gz, for the cases listed in
# tests/data/golden/cli/cases.txt, from a build's fp8sim, through the test that compares them
# (tests/test_cli_golden.cpp, so both run the cases the same way). Review what changed before
# committing it, e.g. `zdiff <(git show HEAD:tests/data/golden/cli/speed.json.gz) ...`.
#
#   bash scripts/gen_cli_golden.sh [BUILD_DIR] [--missing]   (default: build-cpu, else build)
#
# --missing writes only the documents that do not exist yet (a new case). FP8SIM_TEST_BINARY
# set: the documents come from that fp8sim instead of the build's own.
set -euo pipefail
cd "$(dirname "$0")/.."

build="" mode=1
for a in "$@"; do
  case "$a" in
    --missing) mode=missing ;;
    *) build=$a ;;
  esac
done
if [ -z "$build" ]; then
  for c in build-cpu build; do
    if [ -x "$c/tests/test_cli_golden" ]; then build=$c; break; fi
  done
fi
test_bin=${build:+$build/tests/test_cli_golden}
if [ -z "$test_bin" ] || [ ! -x "$test_bin" ]; then
  echo "gen_cli_golden: no tests/test_cli_golden in '${build:-build-cpu or build}' (build the tests first)" >&2
  exit 2
fi
FP8SIM_UPDATE_GOLDEN=$mode "$test_bin" --gtest_filter='CliGolden.*'
echo "gen_cli_golden: wrote tests/data/golden/cli/ (mode $mode); review with git status and zcat"
