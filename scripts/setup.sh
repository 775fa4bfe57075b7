#!/usr/bin/env bash
# Installs everything sparkcdc needs on a fresh Debian machine: MariaDB, Java, etcd and the other
# Debian packages, a virtualenv in .venv with the project and its pinned dependencies, the native
# row decoder, the Spark class archive, and the tools the tests start (Kafka, the schema registry,
# the object storage emulators). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# Debian packages: whatever is missing, in one `apt-get update` and one install (each update costs
# seconds on a fresh machine). maven, npm and go fetch and build the test tools (scripts/setup-kafka.sh,
# scripts/setup-emulators.sh).
missing=()
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then missing+=(mariadb-server mariadb-client); fi
if ! command -v java >/dev/null 2>&1; then missing+=(openjdk-17-jre-headless); fi  # Spark's JVM
if ! command -v etcd >/dev/null 2>&1; then missing+=(etcd-server etcd-client); fi  # cluster metadata, owner election
# The status page's browser test.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then missing+=(chromium chromium-driver); fi
if ! command -v mvn >/dev/null 2>&1; then missing+=(maven); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then missing+=(golang-go); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]} (Debian)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The test tools (Kafka's jars, the schema registry, the object storage emulators: downloads and a
# ~2 min Go build on a fresh machine) are fetched beside the Python setup below, which is mostly
# downloads and unpacking; their output is printed once they are done.
tools_log="$(mktemp)"
(./scripts/setup-emulators.sh && ./scripts/setup-kafka.sh) >"$tools_log" 2>&1 &
tools_pid=$!
# A step below that fails ends this script: the tools' fetch ends with it.
trap 'kill "$tools_pid" 2>/dev/null || true; rm -f "$tools_log"' EXIT

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

# The test tools started above.
tools_status=0
wait "$tools_pid" || tools_status=$?
trap - EXIT
cat "$tools_log"
rm -f "$tools_log"
if [ "$tools_status" != 0 ]; then
  echo "== fetching the test tools failed (scripts/setup-emulators.sh, scripts/setup-kafka.sh): exit $tools_status" >&2
  exit "$tools_status"
fi
