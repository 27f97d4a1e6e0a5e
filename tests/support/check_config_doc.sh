#!/bin/bash
# ctest config_doc_test: docs/configuration.md must be exactly what the binary generates, so
# the reference cannot drift from the config table (server/config.cc).
#   check_config_doc.sh <shoald> <docs/configuration.md>
set -uo pipefail
if ! "$1" --print-config --markdown | diff -u "$2" -; then
  echo "docs/configuration.md is stale: regenerate it with 'make docs'" >&2
  exit 1
fi
