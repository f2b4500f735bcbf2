#!/usr/bin/env bash
# Encodes the text-format seeds fuzz/seeds/<target>/NAME.textproto into the binary inputs
# fuzz/corpus/<target>/seed-NAME that those targets read (the protobuf wire format). Run it after
# adding or editing a seed; the encoded files are checked in.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

declare -A message_of=(
  [shard_request]=slimfit.v1.ComputeGradientRequest
  [plan_request]=slimfit.v1.PlanRequest
  [plan_proto]=slimfit.fuzz.PlanProtoInput
  [coordinator_requests]=slimfit.fuzz.CoordinatorCalls
)
for target in "${!message_of[@]}"; do
  for seed in fuzz/seeds/"$target"/*.textproto; do
    [ -e "$seed" ] || continue
    name=$(basename "$seed" .textproto)
    protoc --proto_path=. --proto_path=/usr/include --encode="${message_of[$target]}" \
      fuzz/fuzz_inputs.proto <"$seed" >"fuzz/corpus/$target/seed-$name"
  done
done
echo "encode_seeds: $(ls fuzz/seeds/*/*.textproto | wc -l) seeds encoded"
