"""Keyword options -> the CLI's `score` flags (same names, `_` for `-`)."""

import os
from typing import Any, Dict, List


def flags(options: Dict[str, Any]) -> List[str]:
    """Turns ``metrics=["cosine", "token_f1"], id_col="qid", idf=True`` into
    ``--metrics cosine,token_f1 --id-col qid --idf``. ``None`` and ``False``
    leave a flag out; lists become comma-separated values; ``threshold``
    takes a dict ``{"token_f1": 0.6}`` or ``"token_f1=0.6"`` strings, and
    ``gold`` a dict ``{"meaning_match": "human_label"}`` likewise;
    ``judge_metrics`` a path or a list of paths and ``judge_band`` a band or
    a list of them, a chain of tiers (one flag each). Unknown
    names reach the CLI's parser, which refuses them (RefscoreError, 64)."""
    out: List[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if name in ("threshold", "thresholds", "gold"):
            items = value.items() if isinstance(value, dict) else None
            values = [f"{k}={v}" for k, v in items] if items is not None else (
                [value] if isinstance(value, str) else list(value))
            for v in values:
                out += ["--gold" if name == "gold" else "--threshold", str(v)]
        elif name in ("judge_metrics", "judge_band"):
            # Repeatable flags: paths (which may hold commas), and the chain
            # of tiers (one band per flag, in order).
            values = [value] if isinstance(value, (str, os.PathLike)) else list(value)
            for v in values:
                out += [flag, os.fspath(v)]
        elif value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, os.PathLike):
            out += [flag, os.fspath(value)]
        else:
            out += [flag, str(value)]
    return out
