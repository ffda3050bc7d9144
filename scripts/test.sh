#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite. Long soaks run only with
# NOVA_SOAK=1.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
npx tsc -p tsconfig.check.json
npx vitest run "$@"
