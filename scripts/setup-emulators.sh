#!/usr/bin/env bash
# Installs the object storage emulators the storage tests start (sparkcdc.testing.emulators):
#   S3    moto[server]      PyPI, pinned in pyproject.toml's `test` extra (installed by setup.sh)
#   Azure Azurite 3.37.0    npm              -> .tools/azurite
#   GCS   fake-gcs-server   Go module proxy  -> .tools/bin
# Idempotent: an installed version is kept, so a second run takes well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

AZURITE_VERSION=3.37.0
FAKE_GCS_VERSION=v1.56.1
TOOLS="${SPARKCDC_TOOLS_DIR:-$PWD/.tools}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

# S3: moto's server comes with the venv's test extra, which setup.sh installs.

# Azure Blob: Azurite from npm (EBADENGINE warnings on Node 20 are harmless).
AZURITE_PKG="$TOOLS/azurite/node_modules/azurite/package.json"
if [ ! -f "$AZURITE_PKG" ] || ! grep -q "\"version\": \"$AZURITE_VERSION\"" "$AZURITE_PKG"; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "== installing nodejs and npm (Debian)"
    apt_install nodejs npm
  fi
  echo "== installing azurite@$AZURITE_VERSION (npm)"
  mkdir -p "$TOOLS/azurite"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/azurite" "azurite@$AZURITE_VERSION" >/dev/null 2>&1 \
    || npm install --no-audit --no-fund --prefix "$TOOLS/azurite" "azurite@$AZURITE_VERSION"
fi

# GCS: fake-gcs-server from the Go module proxy (~2 minutes on a cold module cache).
GCS_STAMP="$TOOLS/bin/.fake-gcs-server-$FAKE_GCS_VERSION"
if [ ! -x "$TOOLS/bin/fake-gcs-server" ] || [ ! -f "$GCS_STAMP" ]; then
  GO=go
  if ! command -v go >/dev/null 2>&1; then
    if [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; else
      echo "== installing golang (Debian)"
      apt_install golang-go
    fi
  fi
  echo "== installing fake-gcs-server@$FAKE_GCS_VERSION (Go module proxy)"
  mkdir -p "$TOOLS/bin"
  GOBIN="$TOOLS/bin" GOFLAGS=-mod=mod "$GO" install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
  rm -f "$TOOLS/bin"/.fake-gcs-server-*
  touch "$GCS_STAMP"
fi
