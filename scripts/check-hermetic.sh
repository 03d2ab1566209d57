#!/usr/bin/env bash
# Runs the unit tier (what `make test-unit` runs, without FORGE_E2E) with
# every test binary traced by strace, and fails if any of them opened a loop
# device, called mount(2), reached a Podman socket or ran podman, losetup or
# mkfs: those are the end-to-end tier's (FORGE_E2E=1). Needs strace; as root
# it is a real check (rootless, most of these fail early anyway).
#   scripts/check-hermetic.sh [packages...]   (default: ./... ./sdk/...)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v strace >/dev/null || { echo "check-hermetic: strace is not installed" >&2; exit 2; }
traces=$(mktemp -d)
trap 'rm -rf "$traces"' EXIT
wrapper="$traces/exec.sh"
cat >"$wrapper" <<WRAP
#!/bin/sh
exec strace -f -qq -o "$traces/\$(basename "\$1").\$\$" -e trace=mount,umount2,openat,connect,execve -e signal=none "\$@"
WRAP
chmod +x "$wrapper"
[ $# -gt 0 ] || set -- ./... ./sdk/...
env -u FORGE_E2E go test -count=1 -exec "$wrapper" "$@"
bad=$( { grep -H '/dev/loop' "$traces"/*.[0-9]* || true
	grep -HE '(^| )(mount|umount2)\(' "$traces"/*.[0-9]* || true
	grep -H 'connect(.*podman' "$traces"/*.[0-9]* || true
	grep -HE 'execve\("[^"]*/(podman|losetup|mkfs[^"/]*)",' "$traces"/*.[0-9]* | grep -v ENOENT || true; } | sed "s|$traces/||")
if [ -n "$bad" ]; then
	echo "check-hermetic: the unit tier touched the host (test binary.pid: syscall):" >&2
	echo "$bad" | head -40 >&2
	exit 1
fi
echo "check-hermetic: no loop device, mount, Podman socket or podman/losetup/mkfs in the unit tier"
