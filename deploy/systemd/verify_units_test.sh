#!/usr/bin/env bash
# The systemd units pass `systemd-analyze verify` with no complaint at all (unknown keys are only
# warnings there, so any output fails the test), with ExecStart pointed at the binaries just built.
set -euo pipefail
coordinator="$(realpath "$1")"
worker="$(realpath "$2")"
units_dir="$(dirname "$(realpath "$3")")"
work="${TEST_TMPDIR:-$(mktemp -d)}/units"
mkdir -p "$work"
sed "s|/usr/local/bin/slimfit-coordinator|$coordinator|" "$units_dir/slimfit-coordinator.service" \
  > "$work/slimfit-coordinator.service"
sed "s|/usr/local/bin/slimfit-worker|$worker|" "$units_dir/slimfit-worker@.service" > "$work/slimfit-worker@.service"
cp "$work/slimfit-worker@.service" "$work/slimfit-worker@gpu0.service"
for unit in slimfit-coordinator.service slimfit-worker@gpu0.service; do
  grep -q "^ExecStart=$coordinator\|^ExecStart=$worker" "$work/$unit" || { echo "FAIL: $unit: ExecStart not rewritten"; exit 1; }
  # The daemons call sd_notify (base/service_notify.h): systemd must wait for READY=1.
  grep -q "^Type=notify$" "$work/$unit" || { echo "FAIL: $unit: not Type=notify"; exit 1; }
done
output="$(cd "$work" && SYSTEMD_LOG_COLOR=0 systemd-analyze verify slimfit-coordinator.service slimfit-worker@gpu0.service 2>&1)" || {
  echo "FAIL: systemd-analyze verify:"; echo "$output"; exit 1; }
if [ -n "$output" ]; then
  echo "FAIL: systemd-analyze verify complained:"; echo "$output"; exit 1
fi
echo "PASS: both units verify"
