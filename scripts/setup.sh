#!/usr/bin/env bash
# Sets up a fresh clone: system packages (UCX, a C++ toolchain), npm dependencies, and the
# build (native addon + TypeScript). Idempotent; quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

# --- system packages -------------------------------------------------------------------
missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists ucx 2>/dev/null; then missing+=(libucx-dev); fi
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || command -v ninja >/dev/null 2>&1 || missing+=(make)
# etcd: the coordinator's optional store (nova coordinator --etcd), which the tests run for real.
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)

if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      say "need root or sudo to install: ${missing[*]}"; exit 1; fi
    say "installing ${missing[*]} with apt-get"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    say "please install these with your package manager, then run me again: ${missing[*]}"
    say "(Debian/Ubuntu names; UCX must be found by 'pkg-config ucx')"
    exit 1
  fi
fi

# --- node ------------------------------------------------------------------------------
if ! command -v node >/dev/null 2>&1; then say "Node.js >= 20.17 is required"; exit 1; fi
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=17)?0:1)' \
  || { say "Node.js >= 20.17 is required (found $(node --version))"; exit 1; }

# --- npm dependencies (only when the lockfile changed) ----------------------------------
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "installing npm dependencies"
  # Not `npm ci`: npm 11 leaves other platforms' optional packages (msgpackr-extract-*) out of
  # the lockfile and then refuses it. --no-save installs the locked versions, writes nothing.
  npm install --no-save --no-audit --no-fund --loglevel=error
fi

# --- build -------------------------------------------------------------------------------
addon=build/Release/nova_transport.node
if [ ! -f "$addon" ] || [ -n "$(find native CMakeLists.txt -newer "$addon" 2>/dev/null | head -n 1)" ]; then
  say "building the native transport"
  npm run --silent build:native >/dev/null
fi
say "compiling TypeScript"
npm run --silent build:ts
say "ready"
