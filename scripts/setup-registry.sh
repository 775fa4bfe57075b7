#!/usr/bin/env bash
# Fetches Apicurio Registry from Maven Central and unpacks it into .tools/apicurio, where
# sparkcdc.testing.schema_registry finds the runner jar; the Avro protocol registers its schemas
# there through the Confluent-compatible API. 3.0.9 is the newest that runs on Java 17.
# Plain curl + the published SHA-1, not Maven: Central lacks the parent pom
# io.apicurio:apicurio-registry:3.0.9, so `mvn dependency:copy` cannot resolve the app.
# Idempotent: returns at once when this version is unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=3.0.9
TOOLS="${SPARKCDC_TOOLS_DIR:-$PWD/.tools}"
DEST="$TOOLS/apicurio"
STAMP="$DEST/.version-$VERSION"
if [ -f "$STAMP" ]; then
  exit 0
fi
URL="https://repo.maven.apache.org/maven2/io/apicurio/apicurio-registry-app/$VERSION/apicurio-registry-app-$VERSION-all.tar.gz"
echo "== fetching Apicurio Registry $VERSION (Maven Central) into $DEST"
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp"
curl -fsSL --retry 3 -o "$DEST.tmp/app.tar.gz" "$URL"
echo "$(curl -fsSL --retry 3 "$URL.sha1" | cut -c1-40)  $DEST.tmp/app.tar.gz" | sha1sum -c --quiet -
tar -xzf "$DEST.tmp/app.tar.gz" -C "$DEST.tmp"
rm "$DEST.tmp/app.tar.gz"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
touch "$STAMP"
