"""One scrape of the operator's /metrics, as the tests and the bench read it: any sample by name and labels,
and the figures both use most (API requests by verb and resource, reconciles, queue depth, watch restarts)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
LEVELS = ("gauge", "info", "stateset")  # family types whose samples are levels, not counts
Labels = frozenset[tuple[str, str]]


@dataclass
class Metrics:
    """Sample values by (sample name, labels), and which samples count (counters, histograms) rather than
    report a level (gauges): the difference of two scrapes subtracts the counts and keeps the later levels."""

    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    counting: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, text: str) -> Metrics:
        metrics = cls()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, frozenset(sample.labels.items()))
                metrics.samples[key] = metrics.samples.get(key, 0.0) + sample.value
                if family.type not in LEVELS:
                    metrics.counting.add(sample.name)
        return metrics

    def value(self, name: str, /, **labels: str) -> float:
        """The sum of `name`'s samples whose labels include `labels`."""
        wanted = labels.items()
        return sum(v for (n, have), v in self.samples.items() if n == name and wanted <= dict(have).items())

    def by_label(self, name: str, *label_names: str) -> Counter[tuple[str, ...]]:
        counts: Counter[tuple[str, ...]] = Counter()
        for (n, have), v in self.samples.items():
            if n == name and v:
                labels = dict(have)
                counts[tuple(labels[k] for k in label_names)] += int(v)
        return +counts

    @property
    def requests(self) -> Counter[tuple[str, ...]]:
        """API requests by (verb, resource, code)."""
        return self.by_label("mpiop_api_requests_total", "verb", "resource", "code")

    def total(self) -> int:
        return sum(self.requests.values())

    def writes(self, *, except_resource: str = "leases") -> int:
        """Write requests, less those to `except_resource` (a leader's lease renewals)."""
        return sum(n for (verb, resource, _), n in self.requests.items()
                   if verb in WRITE_VERBS and resource != except_resource)

    def by_verb(self) -> Counter[str]:
        """Requests by "VERB resource"."""
        return Counter({f"{verb} {resource}": n for (verb, resource), n in
                        self.by_label("mpiop_api_requests_total", "verb", "resource").items()})

    @property
    def reconciles(self) -> float:
        return self.value("mpiop_reconcile_duration_seconds_count")

    @property
    def queue_depth(self) -> float:
        return self.value("mpiop_workqueue_depth")

    @property
    def watch_restarts(self) -> Counter[str]:
        """Watch streams the apiserver closed, by resource."""
        return Counter({resource: n for (resource,), n in
                        self.by_label("mpiop_watch_restarts_total", "resource").items()})

    def __sub__(self, earlier: Metrics) -> Metrics:
        samples = {key: v - earlier.samples.get(key, 0.0) if key[0] in self.counting else v
                   for key, v in self.samples.items()}
        return Metrics(samples, set(self.counting))
