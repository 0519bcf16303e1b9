#!/usr/bin/env bash
# make check: Storm's layers hold (lib/README.md): no include runs up a
# layer or across capabilities, and each layer's library links with the
# layers beneath it alone (contrib/check-layers says what it checks).
exec "${STORM_SRCDIR:?}/contrib/check-layers" --link "$STORM_SRCDIR"
