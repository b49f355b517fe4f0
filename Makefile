# Build and install storectl: the release binary, its man page and its shell completions.
#
#   make                          # swift build -c release
#   sudo make install             # into /usr/local
#   make install PREFIX=$HOME/.local
#   make uninstall PREFIX=...
#
# The release binary links the Swift runtime statically: the machine it runs on needs the system libraries
# (libsqlite3, libyaml, and libpq for postgres:// URLs), not the Swift toolchain. scripts/test-release.sh checks it.

PREFIX ?= /usr/local
DESTDIR ?=
SWIFT ?= swift
BINDIR = $(DESTDIR)$(PREFIX)/bin
MANDIR = $(DESTDIR)$(PREFIX)/share/man/man1
BASHDIR = $(DESTDIR)$(PREFIX)/share/bash-completion/completions
ZSHDIR = $(DESTDIR)$(PREFIX)/share/zsh/site-functions
FISHDIR = $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
DOCDIR = $(DESTDIR)$(PREFIX)/share/doc/storectl
BIN = $(shell $(SWIFT) build -c release --show-bin-path)/storectl

.PHONY: all build install uninstall test-release

all: build

build:
	$(SWIFT) build -c release --product storectl

install: build
	install -d "$(BINDIR)" "$(MANDIR)" "$(BASHDIR)" "$(ZSHDIR)" "$(FISHDIR)" "$(DOCDIR)"
	install -m 0755 "$(BIN)" "$(BINDIR)/storectl"
	"$(BINDIR)/storectl" man > "$(MANDIR)/storectl.1"
	"$(BINDIR)/storectl" completions bash > "$(BASHDIR)/storectl"
	"$(BINDIR)/storectl" completions zsh > "$(ZSHDIR)/_storectl"
	"$(BINDIR)/storectl" completions fish > "$(FISHDIR)/storectl.fish"
	chmod 0644 "$(MANDIR)/storectl.1" "$(BASHDIR)/storectl" "$(ZSHDIR)/_storectl" "$(FISHDIR)/storectl.fish"
	# The docs the man page cites (json.md: every JSON document).
	install -m 0644 README.md docs/*.md "$(DOCDIR)/"

uninstall:
	rm -f "$(BINDIR)/storectl" "$(MANDIR)/storectl.1" "$(BASHDIR)/storectl" "$(ZSHDIR)/_storectl" \
	    "$(FISHDIR)/storectl.fish"
	rm -rf "$(DOCDIR)"

test-release:
	bash scripts/test-release.sh
