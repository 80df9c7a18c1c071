"""Which series a PromQL expression reads: the metric names and the labels it names, for
checking the rules and the dashboard against what the daemon exports (test_metric_names.py).

Not a PromQL parser: a scanner for the subset the rules and dashboard use (selectors with
label matchers, ranges, functions and aggregations with by/without, binary operators with
on/ignoring/group_left/group_right, numbers, Grafana's $variables and label_values()). Every
identifier that is not a function or aggregation (it is followed by "("), a keyword, a label of
a by/on/... list or a matcher, or a number, is a metric name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "inf",
    "nan",
}
# Label lists follow these: `sum by (method) (...)`, `a / on (device) b`.
LABEL_LIST_KEYWORDS = ("by", "without", "on", "ignoring", "group_left", "group_right")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:\"\"|'')\s*,?")
_RANGE = re.compile(r"\[[^\]]*\]")
# `offset 5m`, `@ 1609746000`, `@ start()`: durations and times, not names.
_MODIFIER = re.compile(r"\boffset\s+-?[0-9a-zA-Z]+|@\s*(?:start\(\)|end\(\)|[0-9.]+)")
_LABEL_LIST = re.compile(r"\b(" + "|".join(LABEL_LIST_KEYWORDS) + r")\s*\(([^)]*)\)")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:.])(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


@dataclass
class Reads:
    """What one expression reads."""

    metrics: set[str] = field(default_factory=set)
    # Labels named in each metric's matchers: metric -> labels.
    matcher_labels: dict[str, set[str]] = field(default_factory=dict)
    # Labels of by/without/on/ignoring/group_* lists anywhere in the expression.
    grouping_labels: set[str] = field(default_factory=set)


def label_values_query(query: str) -> str | None:
    """The series selector of Grafana's label_values(SELECTOR, label), or None when the query
    is not one (label_values(label) alone reads no metric)."""
    match = re.fullmatch(r"\s*label_values\s*\((.*)\)\s*", query, re.S)
    if not match:
        return None
    arguments = match.group(1)
    if "," not in arguments:
        return ""
    return arguments.rsplit(",", 1)[0]


def reads(expr: str) -> Reads:
    result = Reads()
    text = _GRAFANA_VARIABLE.sub("", _STRING.sub('""', expr))

    def selector(match: re.Match) -> str:
        name, body = match.group(1), match.group(2)
        labels = set()
        rest = body
        while rest.strip():
            matcher = _MATCHER.match(rest)
            if not matcher:
                raise ValueError(f"cannot read the matchers {{{body}}} in {expr!r}")
            labels.add(matcher.group(1))
            rest = rest[matcher.end() :]
        if name:
            result.matcher_labels.setdefault(name, set()).update(labels)
            return f" {name} "
        return " "

    text = _SELECTOR.sub(selector, text)
    text = _RANGE.sub(" ", text)
    text = _MODIFIER.sub(" ", text)

    def label_list(match: re.Match) -> str:
        labels = [label.strip() for label in match.group(2).split(",") if label.strip()]
        result.grouping_labels.update(labels)
        return f" {match.group(1)} "

    text = _LABEL_LIST.sub(label_list, text)
    text = _NUMBER.sub(" ", text)
    for match in _IDENTIFIER.finditer(text):
        name = match.group(0)
        if name.lower() in KEYWORDS:
            continue
        following = text[match.end() :].lstrip()
        if following.startswith("(") or re.match(r"(by|without)\b", following):
            continue  # a function, or an aggregation (`sum by (job) (...)`)
        result.metrics.add(name)
    for name in result.matcher_labels:
        result.metrics.add(name)
    return result


def exported_series(metrics_text: str) -> tuple[dict[str, set[str]], dict[str, str]]:
    """From the Prometheus text format: every sample name with the labels its samples carry,
    and every family's type (# TYPE lines). A histogram family F is exported as F_bucket (with
    `le`), F_sum and F_count, never as F itself."""
    samples: dict[str, set[str]] = {}
    types: dict[str, str] = {}
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind.strip()
            continue
        if not line or line.startswith("#"):
            continue
        match = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{([^}]*)\})?\s", line)
        if not match:
            raise ValueError(f"not a sample line: {line!r}")
        labels = set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', match.group(3) or ""))
        samples.setdefault(match.group(1), set()).update(labels)
    return samples, types
