#!/usr/bin/env bash
# Builds the release binary, installs it with `make install` into a temporary prefix, and runs it on a machine
# without the Swift toolchain: a private mount namespace hides the toolchain's folder (as root), and the library
# path is emptied. Prints "release: N passed, N failed" and exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

swift_bin=$(readlink -f "$(command -v swift)")
toolchain=$(dirname "$(dirname "$(dirname "$swift_bin")")")   # /opt/swift for /opt/swift/usr/bin/swift-driver
work=$(mktemp -d /tmp/storectl-release.XXXXXX)
trap 'rm -rf "$work"' EXIT

make -s install PREFIX="$work/prefix" >/dev/null
bin="$work/prefix/bin/storectl"

passed=0
failed=0
check() {
    local name=$1; shift
    if "$@" >"$work/out" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "release check failed: $name" >&2
        cat "$work/out" >&2
    fi
}

# What the dynamic loader needs: nothing from the toolchain.
check "no toolchain library is linked" sh -c "! ldd '$bin' | grep -F '$toolchain'"

mkdir -p "$work/app"
cat > "$work/app/config.yaml" <<'YAML'
version: 1
stores:
  notes:
    path: notes.sqlite
    schema: schema.sql
    cloud:
      container: iCloud.com.example.release
      url: file:cloud/notes.container
      create_if_missing: true
      account: demo
      secret: ${RELEASE_SECRET:-demo-secret}
YAML
echo "CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);" > "$work/app/schema.sql"
chmod 600 "$work/app/config.yaml"

# The toolchain's folder hidden (an empty tmpfs over it) and no library path: as on a machine without Swift.
without_toolchain() {
    unshare --mount -- sh -c 'mount -t tmpfs none "$1" && shift && cd "$0" && exec env -i PATH=/usr/bin:/bin HOME="$0" "$@"' \
        "$work/app" "$toolchain" "$@"
}
check "the toolchain is really hidden" without_toolchain sh -c "! test -e '$swift_bin'"
check "--version runs" without_toolchain "$bin" --version
check "mode cloud runs" without_toolchain "$bin" mode cloud
check "status --json is a version 1 document" without_toolchain sh -c "'$bin' --json status | grep -q '\"version\" : 1'"
check "the installed man page renders" sh -c "MANPAGER=cat man -l '$work/prefix/share/man/man1/storectl.1' | grep -q SYNOPSIS"
check "the installed bash completion loads" bash -c "source '$work/prefix/share/bash-completion/completions/storectl' && complete -p storectl"
check "the docs the man page cites are installed" test -s "$work/prefix/share/doc/storectl/json.md"
make -s uninstall PREFIX="$work/prefix" >/dev/null
check "uninstall removes the binary" sh -c "! test -e '$bin'"
check "uninstall removes the docs" sh -c "! test -e '$work/prefix/share/doc/storectl'"

echo "release: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
