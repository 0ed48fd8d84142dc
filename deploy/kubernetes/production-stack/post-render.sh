#!/bin/sh
# Helm post-renderer for vLLM production-stack: adds runaway-sidecar to every engine pod
# (see values.yaml beside it). Reads the chart's manifests on stdin, writes them with the
# sidecar on stdout; needs kubectl (or $KUBECTL).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/kustomization.yaml" "$here/rename-vllm-port.yaml" "$here/add-sidecar.yaml" \
  "$here/sidecar.toml" "$work/"
cat >"$work/chart.yaml"
"${KUBECTL:-kubectl}" kustomize "$work"
