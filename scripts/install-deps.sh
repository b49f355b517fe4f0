#!/usr/bin/env bash
# Installs the Debian packages storectl builds and tests with, if any is missing.
# Needs root (or sudo). Safe to run again: it does nothing when everything is there.
set -euo pipefail
# zsh, fish, man-db and groff-base: the tests load the completion scripts and render the man page.
# prometheus: the tests check the metrics text and the documented alert rule with its promtool (the package's
# service is not needed, and is not started in a container without systemd).
packages=(libsqlite3-dev libyaml-dev libpq-dev libssl-dev postgresql sqlite3 python3 zsh fish man-db groff-base
          prometheus)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
