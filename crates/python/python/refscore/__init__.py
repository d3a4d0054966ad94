"""refscore from Python: the same Rust code as the ``refscore`` CLI.

- :class:`Scorer` loads the model (and judge client) once and scores any
  Arrow data (pyarrow, Polars, DuckDB, ... anything with
  ``__arrow_c_stream__``) into a ``pyarrow.Table`` with the CLI's columns;
- :func:`score_parquet` runs the CLI's whole ``score`` job and returns its
  summary;
- :mod:`refscore.ray` spreads scoring over a Ray cluster.

Options are the CLI's ``score`` options with ``_`` for ``-``
(``metrics=["token_f1", "cosine"]``, ``reference_col="gold"``,
``judge_url=...``); errors raise :class:`RefscoreError` with the CLI's
message and exit code.
"""

import json
import os
from typing import Any, Dict

from . import _native
from ._errors import USAGE, RefscoreError
from ._options import flags as _flags

__all__ = ["Scorer", "score_parquet", "RefscoreError", "METRICS"]

#: Every metric refscore computes, from the Rust registry the CLI reads:
#: name, group, family, kind ("binary" or "score"), default_threshold,
#: columns, reason_column and source_column.
METRICS = [dict(m) for m in _native.METRICS]

# Options of a job over files; a Scorer gets its data per call.
_JOB_ONLY = ("input", "output", "overwrite", "resume", "shard", "max_judge_failures", "quiet")


class Scorer:
    """Scores in-memory data with the CLI's metric stages, loaded once.

    ``Scorer(metrics=["lexical", "cosine"], model="models/all-MiniLM-L6-v2")``
    takes every ``refscore score`` option except the job's own (input,
    output, overwrite, resume, shard, max_judge_failures, quiet).
    """

    def __init__(self, **options: Any):
        job_only = sorted(set(options) & set(_JOB_ONLY))
        if job_only:
            raise RefscoreError(
                f"{', '.join(job_only)}: options of a job over files; use refscore.score_parquet", USAGE)
        self.options = dict(options)
        self._native = _native.Scorer(_flags(options))

    def score(self, data: Any):
        """Scores ``data`` (anything exporting ``__arrow_c_stream__``: a
        pyarrow Table or RecordBatchReader, a Polars DataFrame, a DuckDB
        result's ``.arrow()``) and returns a ``pyarrow.Table`` with the CLI's
        output columns and types: ``id``, the metrics, ``status``, ``error``,
        then any ``keep`` columns. The GIL is released while scoring.
        Without an id column the id is the row ordinal within ``data``."""
        if not hasattr(data, "__arrow_c_stream__"):
            if hasattr(data, "to_arrow"):  # e.g. an older Polars
                data = data.to_arrow()
            else:
                raise TypeError(
                    f"{type(data).__name__} does not export an Arrow stream (__arrow_c_stream__)")
        return self._native.score(data)

    def __reduce__(self):
        # Picklable by its options (the model is loaded again where it lands).
        return (_rebuild, (self.options,))


def _rebuild(options: Dict[str, Any]) -> "Scorer":
    return Scorer(**options)


def score_parquet(input: "str | os.PathLike", output: "str | os.PathLike", **options: Any) -> Dict[str, Any]:
    """Runs ``refscore score INPUT -o OUTPUT [options]`` (the whole CLI job:
    checks, checkpoints, ``resume``, ``shard``, the summary file) and returns
    the summary as a dict. No table is printed; progress goes to stderr
    unless ``quiet=True``."""
    args = [os.fspath(input), "-o", os.fspath(output), *_flags(options)]
    return json.loads(_native.score_parquet(args))
