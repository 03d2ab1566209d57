#!/usr/bin/env bash
# `make install` into a staging directory, as a fresh clone would run it:
# every file it installs must come from the tree (dist/ was once ignored and
# the target failed on every clone), and the installed server must accept
# the configuration it installs.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
make -s install DESTDIR="$stage" PREFIX=/usr/local >/dev/null
for f in usr/local/lib/mcp-forge/mcp-forge usr/local/lib/mcp-forge/mcp-forge-agent usr/local/bin/mcp-forge \
         etc/systemd/system/mcp-forge.service etc/systemd/user/mcp-forge.service \
         etc/mcp-forge/forge.toml etc/mcp-forge/forge.toml.example \
         usr/local/share/doc/mcp-forge/operations.md; do
  [ -e "$stage/$f" ] || { echo "make install did not install /$f" >&2; exit 1; }
done
ls "$stage"/usr/local/lib/mcp-forge/mcp-forge-plugin-* >/dev/null
if grep -l '@PREFIX@' "$stage"/etc/systemd/system/mcp-forge.service "$stage"/etc/systemd/user/mcp-forge.service; then
  echo "an installed unit still says @PREFIX@" >&2; exit 1
fi
[ "$(stat -c %a "$stage/etc/mcp-forge/forge.toml")" = 600 ] || { echo "/etc/mcp-forge/forge.toml is not 0600" >&2; exit 1; }
"$stage/usr/local/lib/mcp-forge/mcp-forge" config check "$stage/etc/mcp-forge/forge.toml"
"$stage/usr/local/lib/mcp-forge/mcp-forge" config check "$stage/etc/mcp-forge/forge.toml.example"
echo "make install: ok"
