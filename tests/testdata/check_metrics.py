#!/usr/bin/env python3
"""Parses Prometheus text expositions with the Prometheus project's own Python client
(Debian's python3-prometheus-client), checks what a scraper relies on, and prints what it read.

  check_metrics.py FILE...

For each file: every family has HELP text and a type; counters are finite and not negative; each
histogram's buckets are cumulative, end with le="+Inf", and +Inf equals _count. Prints one JSON
object {FILE: {"families": {NAME: TYPE}, "samples": [[SAMPLE_NAME, {LABEL: VALUE}, VALUE], ...]}}
(values as numbers, or "+Inf"/"-Inf"/"NaN"). Exits 1 with a message on the first problem, 2 for a
usage error.
"""
import collections
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def fail(message):
    print(f"check_metrics: {message}", file=sys.stderr)
    sys.exit(1)


def number(value):
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def check_histogram(name, samples):
    series = collections.defaultdict(lambda: {"buckets": [], "count": None, "sum": None})
    for sample in samples:
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        if sample.name == name + "_bucket":
            if "le" not in sample.labels:
                fail(f"{name}: a bucket without le")
            series[labels]["buckets"].append((float(sample.labels["le"]), sample.value))
        elif sample.name == name + "_count":
            series[labels]["count"] = sample.value
        elif sample.name == name + "_sum":
            series[labels]["sum"] = sample.value
        else:
            fail(f"{name}: unexpected sample {sample.name}")
    for labels, parts in series.items():
        buckets = parts["buckets"]
        if not buckets or buckets[-1][0] != math.inf:
            fail(f"{name}{dict(labels)}: the last bucket is not le=\"+Inf\"")
        bounds = [b for b, _ in buckets]
        if bounds != sorted(bounds) or len(set(bounds)) != len(bounds):
            fail(f"{name}{dict(labels)}: bucket bounds are not strictly increasing")
        counts = [c for _, c in buckets]
        if any(b < a for a, b in zip(counts, counts[1:])):
            fail(f"{name}{dict(labels)}: bucket counts are not cumulative")
        if parts["count"] is None or parts["sum"] is None:
            fail(f"{name}{dict(labels)}: missing _count or _sum")
        if counts[-1] != parts["count"]:
            fail(f"{name}{dict(labels)}: +Inf bucket {counts[-1]} != _count {parts['count']}")


def read(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    families = {}
    samples = []
    try:
        parsed = list(text_string_to_metric_families(text))
    except ValueError as error:
        fail(f"{path}: the parser refused it: {error}")
    for family in parsed:
        if family.type not in ("counter", "gauge", "histogram"):
            fail(f"{path}: {family.name} has type {family.type} (a sample without # TYPE?)")
        if not family.documentation:
            fail(f"{path}: {family.name} has no HELP text")
        if family.name in families:
            fail(f"{path}: {family.name} appears twice")
        families[family.name] = family.type
        if family.type == "counter":
            for sample in family.samples:
                if not (math.isfinite(sample.value) and sample.value >= 0):
                    fail(f"{path}: counter {sample.name} is {sample.value}")
        if family.type == "histogram":
            check_histogram(family.name, family.samples)
        for sample in family.samples:
            samples.append([sample.name, sample.labels, number(sample.value)])
    return {"families": families, "samples": samples}


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    json.dump({path: read(path) for path in sys.argv[1:]}, sys.stdout)


if __name__ == "__main__":
    main()
