#!/usr/bin/env bash
# Checks that every C++ / CUDA source of the project is laid out as .clang-format says, with
# clang-format 14 (Debian 12's; other versions lay some constructs out differently). Exit 0 when
# clean, 1 naming the files that are not (fix: clang-format-14 -i FILE...), 77 (CTest: skipped)
# when clang-format 14 is not installed (scripts/setup.sh installs it).
#   usage: bash scripts/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || true)
if [[ -z "$cf" ]] && command -v clang-format >/dev/null 2>&1 && clang-format --version | grep -q "version 14\."; then
  cf=$(command -v clang-format)
fi
if [[ -z "$cf" ]]; then
  echo "check_format: clang-format 14 not found (bash scripts/setup.sh installs it): skipped"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
else
  mapfile -t files < <(find sim gpu tests -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \))
fi
if [[ "${1:-}" == "--fix" ]]; then
  "$cf" -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format (bash scripts/check_format.sh --fix): ${bad[*]}"
  exit 1
fi
echo "check_format: ${#files[@]} files laid out as .clang-format says"
