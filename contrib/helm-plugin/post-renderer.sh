#!/bin/sh
# Manifests on stdin; the same manifests with wave.pusher.com/config-hash set on stdout.
# Objects without a namespace are hashed in the release namespace (Helm sets HELM_NAMESPACE).
exec "${WAVE_BIN:-wave}" hash --inject "$@"
