#!/usr/bin/env bash
# Fetches the Apache Kafka broker jars (KRaft, see tools/kafka/pom.xml) from Maven Central into
# .tools/kafka/lib, where sparkcdc.testing.kafka and scripts/kafka.sh-style users find them.
# Idempotent: when the jars of this pom are present it returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup-registry.sh  # the Confluent-compatible schema registry the Avro protocol needs

TOOLS="${SPARKCDC_TOOLS_DIR:-$PWD/.tools}"
DEST="$TOOLS/kafka"
STAMP="$DEST/lib/.pom-$(sha1sum tools/kafka/pom.xml | cut -c1-12)"
if [ -f "$STAMP" ]; then
  exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
  SUDO=""; if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "== installing maven (Debian)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq maven >/dev/null
fi
echo "== fetching Apache Kafka jars (Maven Central) into $DEST/lib"
rm -rf "$DEST/lib.tmp"
mkdir -p "$DEST"
mvn -q -B -f tools/kafka/pom.xml dependency:copy-dependencies \
  -DoutputDirectory="$DEST/lib.tmp" -DincludeScope=runtime
rm -rf "$DEST/lib"
mv "$DEST/lib.tmp" "$DEST/lib"
touch "$STAMP"
