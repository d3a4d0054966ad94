"""Code the generators and benchmarks under scripts/ share, in one copy so the copies cannot drift apart."""

# Standard library only at import time: the benchmarks import it on machines
# that have nothing but their own virtualenv. A script under scripts/<folder>/
# finds it, from any working directory, with
#
#     sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))
#     from refscore_scripts import ...  # noqa: E402

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from types import ModuleType
from typing import Callable

# The repository root (this file is scripts/common/refscore_scripts.py), so no
# script has to count how deep it lies.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Where scripts/fetch-model.sh puts the default model.
DEFAULT_MODEL = os.path.join(REPO, "models", "all-MiniLM-L6-v2")


def logger(tag: str) -> Callable[[str], None]:
    """Makes the scripts' progress logger: it prints `[tag] msg` to stderr, flushed at once."""
    def log(msg: str) -> None:
        print(f"[{tag}] {msg}", file=sys.stderr, flush=True)
    return log


def load_script(path: str) -> ModuleType:
    """Imports a script by path, since a kebab-case file name cannot be imported by name."""
    name = os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_env(threads: int) -> None:
    """Keeps the reference libraries offline and on `threads` threads; call it before importing them."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ["OMP_NUM_THREADS"] = str(threads)


def patch_bert_score_empty_text() -> None:
    """Lets bert_score 0.3.13 encode an empty text under transformers 5 ([CLS][SEP], as under 4)."""
    # For an empty (after strip) text bert_score calls
    # tokenizer.build_inputs_with_special_tokens([]), a method transformers 5
    # removed; under transformers 4 it returned [CLS][SEP].
    import bert_score.utils as bs_utils
    orig_sent_encode = bs_utils.sent_encode

    def sent_encode(tokenizer, sent):
        if sent.strip() == "":
            return [tokenizer.cls_token_id, tokenizer.sep_token_id]
        return orig_sent_encode(tokenizer, sent)

    bs_utils.sent_encode = sent_encode


def cpu_model() -> str:
    """The CPU's model name from lscpu ("?" if none), so a measurement says where it was made."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")


def write_example_copies(folder: str, files: int, copies: int, row_group_size: int) -> int:
    """Writes `files` Parquet files into `folder` (made here), each the
    example's rows repeated `copies` times with every copy's texts and ids
    made distinct (so no cache can skip a row), in row groups of
    `row_group_size`; returns the rows written. The Ray and Spark tests and
    benchmarks score these. Imports pyarrow when called."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    base = pq.read_table(os.path.join(REPO, "examples", "qa.parquet")).select(["id", "question", "reference", "output"])
    os.makedirs(folder)
    rows = 0
    for f in range(files):
        parts = []
        for c in range(copies):
            tag = pa.scalar(f" [{f}.{c}]")
            parts.append(pa.table({
                "id": pc.binary_join_element_wise(base["id"], pa.scalar(f"-{f}-{c}"), ""),
                "question": base["question"],
                "reference": pc.binary_join_element_wise(base["reference"], tag, ""),
                "output": pc.binary_join_element_wise(base["output"], tag, ""),
            }))
        table = pa.concat_tables(parts)
        pq.write_table(table, os.path.join(folder, f"part-{f}.parquet"), row_group_size=row_group_size)
        rows += table.num_rows
    return rows
