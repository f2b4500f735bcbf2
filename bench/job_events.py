#!/usr/bin/env python3
"""Sums a job's event stream (`slimfit watch JOB --from_start --json`, one JSON object per line)
for the benches: held-out bits per byte of the first and last evaluation, bytes to and from the
workers over the training rounds (RoundCompleted.timing), and predicted tokens trained.

Usage: bench/job_events.py EVENTS_FILE NAME
Prints one line: "BPB_FIRST BPB_LAST BYTES_TO BYTES_FROM TOKENS"; exits non-zero naming NAME (the
calling bench) when the stream holds fewer than two evaluations or no round.
"""
import json
import sys


def main():
    path, name = sys.argv[1], sys.argv[2]
    evaluations, to_workers, from_workers, tokens = [], 0, 0, 0
    with open(path) as events:
        for line in events:
            event = json.loads(line)
            if "evaluation" in event:
                evaluations.append(float(event["evaluation"].get("bits_per_byte", 0)))
            done = event.get("round_completed")
            if done:
                timing = done.get("timing", {})
                to_workers += int(timing.get("bytes_to_workers", 0))
                from_workers += int(timing.get("bytes_from_workers", 0))
                tokens += int(done.get("tokens", 0))
    if len(evaluations) < 2 or tokens == 0:
        sys.exit("%s: no evaluations or rounds in %s" % (name, path))
    print(evaluations[0], evaluations[-1], to_workers, from_workers, tokens)


if __name__ == "__main__":
    main()
