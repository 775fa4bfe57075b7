#!/usr/bin/env bash
# Installs everything sparkcdc needs on a fresh Debian machine: MariaDB from Debian, Java check,
# and a virtualenv in .venv with the project and its pinned dependencies. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  echo "== installing mariadb-server (Debian)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mariadb-server mariadb-client >/dev/null
fi

if ! command -v java >/dev/null 2>&1; then
  echo "== installing a Java runtime for Spark (Debian)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if ! command -v etcd >/dev/null 2>&1; then
  echo "== installing etcd-server (Debian) for cluster metadata and owner election"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server etcd-client >/dev/null
fi

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  echo "== installing chromium and chromium-driver (Debian) for the status page's browser test"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PYTHON" -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  echo "== installing sparkcdc and its pinned dependencies into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  touch .venv/.installed
fi

# Native row decoder (optional): Rust, built from native/ into .venv with maturin when cargo is
# installed (rustup's ~/.cargo/bin counts). Without cargo sparkcdc uses the pure Python decoder;
# `sparkcdc --version` says which one is in use. Rebuilt only when native/ changes.
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if command -v cargo >/dev/null 2>&1; then
  native_stamp="$(cat native/Cargo.toml native/Cargo.lock native/pyproject.toml native/src/*.rs | sha256sum | cut -d' ' -f1)"
  if [ "$(cat .venv/.native-built 2>/dev/null)" != "$native_stamp" ]; then
    echo "== building the native row decoder (native/, Rust via maturin)"
    .venv/bin/pip install -q ./native
    echo "$native_stamp" > .venv/.native-built
  fi
else
  echo "== cargo not found: skipping the native row decoder; the pure Python decoder will be used"
fi

# Class-data-sharing archive of the Spark driver JVM's classes (src/sparkcdc/pipeline/class_archive.py):
# a capture's Spark starts faster with it. Made once per JDK and pyspark, in ~/.cache/sparkcdc
# ($SPARKCDC_CACHE_DIR); ~1 min. Without it sparkcdc works the same, only starts slower.
if ! .venv/bin/python -m sparkcdc.pipeline.class_archive; then
  echo "== could not make the Spark class archive; sparkcdc runs without it"
fi

# Object storage emulators (S3, GCS, Azure) used by the storage tests.
if [ -x scripts/setup-emulators.sh ]; then
  ./scripts/setup-emulators.sh
fi
./scripts/setup-kafka.sh
