#!/usr/bin/env bash
# Stand-in for Bazel's remote coverage tools, which cannot be downloaded offline.
echo "coverage tools are not available in this offline build" >&2
exit 0
