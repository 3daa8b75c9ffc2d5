#!/bin/sh
# Installs @sbxdb/tanstack-ai as a host does and runs it there: builds the
# server package of this machine's platform (scripts/build-platform.mjs),
# packs it and the package (npm pack: dist/ built by prepare), installs
# both tarballs into a fresh temporary project (offline when npm's cache
# has what it needs, which it does after npm ci), and runs
# scripts/install-check.mjs in it: a round trip through connect() to an
# `sbxdb serve` of the installed binary, then open() of one directory from
# two Node processes at once (one server starts, both use it, it exits
# once both have closed). Run from anywhere: sh scripts/install-test.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(dirname "$here")
work=$(mktemp -d "${TMPDIR:-/tmp}/sbxdb-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

target=$(node -p 'process.platform + "-" + process.arch')
echo "== build and pack @sbxdb/server-$target and @sbxdb/tanstack-ai"
node "$pkg/scripts/build-platform.mjs" --targets "$target" --pack --out "$work/npm"
main=$(ls "$work"/npm/sbxdb-tanstack-ai-*.tgz)
server=$(ls "$work"/npm/sbxdb-server-"$target"-*.tgz)
tar tzf "$main" | grep -q '^package/dist/index.js$' || { echo "the packed package has no dist/index.js"; exit 1; }

echo "== npm install of the tarballs into a fresh project"
mkdir "$work/host"
cd "$work/host"
printf '{"name":"sbxdb-install-test-host","version":"1.0.0","private":true,"type":"module"}\n' > package.json
if ! npm install --offline --no-audit --no-fund "$main" "$server"; then
  echo "(offline install failed; trying with the registry)"
  npm install --prefer-offline --no-audit --no-fund "$main" "$server"
fi
cp "$pkg/scripts/install-check.mjs" .
node install-check.mjs
