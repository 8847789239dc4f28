"""The metric names a PromQL expression reads, and every expression the deploy/ files hold.

A small tokenizer rather than a PromQL parser: it removes what cannot be a metric name
(string literals, label matchers, range and subquery brackets, grouping clauses, Grafana
variables), then keeps the identifiers that are neither function calls nor keywords.
Grafana's ``label_values(selector, label)`` variable queries are reduced to their selector.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VAR = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_VALUES = re.compile(r"^\s*label_values\s*\((.*)\)\s*$", re.S)
KEYWORDS = frozenset(
    {
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
        "start",
        "end",
        "inf",
        "nan",
    }
)


def metric_names(expr: str) -> set[str]:
    """Names of the metrics ``expr`` selects (PromQL, or a Grafana ``label_values`` query)."""
    lv = _LABEL_VALUES.match(expr)
    if lv is not None:
        args = lv.group(1)
        # label_values(label) names no metric; label_values(selector, label) reads the selector.
        selector, _, _label = args.rpartition(",")
        return metric_names(selector) if selector else set()
    text = _STRING.sub('""', expr)
    text = _GRAFANA_VAR.sub("", text)
    text = _MATCHERS.sub(" ", text)
    text = _BRACKETS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for m in _IDENT.finditer(text):
        if m.start() > 0 and (text[m.start() - 1].isdigit() or text[m.start() - 1] == "."):
            continue  # the tail of a number or a duration: 1e3, 0.5m
        if text[m.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if m.group().lower() in KEYWORDS:
            continue
        names.add(m.group())
    return names


def rule_expressions(path: Path) -> dict[str, str]:
    """``{alert or record name: expr}`` of a Prometheus rule file."""
    doc = yaml.safe_load(path.read_text())
    out = {}
    for group in doc["groups"]:
        for rule in group["rules"]:
            out[rule.get("alert") or rule["record"]] = rule["expr"]
    return out


def dashboard_expressions(path: Path) -> dict[str, str]:
    """``{where: query}`` for every panel target and query variable of a Grafana dashboard."""
    dash: dict[str, Any] = json.loads(path.read_text())
    out = {}
    panels = list(dash["panels"])
    for panel in panels:
        panels.extend(panel.get("panels", []))  # the panels of a collapsed row
        for target in panel.get("targets", []):
            out[f"panel {panel['id']} ({panel['title']}) {target['refId']}"] = target["expr"]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            out[f"variable {var['name']}"] = query["query"] if isinstance(query, dict) else query
    return out
