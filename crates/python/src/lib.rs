//! `refscore._native`: the Python face of the `refscore` library (the CLI's
//! own code). The Python package (`python/refscore`) turns keyword options
//! into `score` flags and calls these functions; nothing here scores.

use std::sync::Mutex;

use arrow::array::RecordBatchReader;
use arrow::error::ArrowError;
use arrow_pyarrow::{FromPyArrow, IntoPyArrow, Table};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use refscore_core::{Error, ErrorClass};

/// A `refscore.RefscoreError` carrying the CLI's message and exit code.
fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let code = refscore::exit_code(e.class);
    match py
        .import("refscore._errors")
        .and_then(|m| m.getattr("RefscoreError"))
        .and_then(|cls| cls.call1((e.message.clone(), code)))
    {
        Ok(err) => PyErr::from_value(err),
        Err(import) => import,
    }
}

/// The CLI's `main` with `argv` (program name first); returns the exit code.
/// The GIL is released while it runs.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| refscore::main(argv))
}

/// Runs a whole `score` job from its flags; returns the summary as JSON text.
#[pyfunction]
fn score_parquet(py: Python<'_>, flags: Vec<String>) -> PyResult<String> {
    py.detach(|| refscore::score_parquet(&flags))
        .map_err(|e| to_py(py, e))
}

/// Checks flags and the column mapping against a schema (anything with
/// `__arrow_c_schema__`) without loading a model, for a driver that splits
/// data across workers. Returns a dict: `batch_size`, `id_column` (or None),
/// `result_schema` (a `pyarrow.Schema`), `judged` (whether a judge is
/// asked), `judge_rpm` and `judge_tpm` (or None). `partitioned` refuses the
/// options fitted on the whole input (`idf`, `rescale_baseline="auto"`).
#[pyfunction]
#[pyo3(signature = (flags, schema, partitioned = true))]
fn plan<'py>(
    py: Python<'py>,
    flags: Vec<String>,
    schema: &Bound<'py, PyAny>,
    partitioned: bool,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let schema = arrow::datatypes::Schema::from_pyarrow_bound(schema)?;
    let plan = refscore::plan(&flags, &schema, partitioned).map_err(|e| to_py(py, e))?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("batch_size", plan.batch_size)?;
    d.set_item("id_column", plan.id_column)?;
    d.set_item(
        "result_schema",
        plan.result_schema.as_ref().clone().into_pyarrow(py)?,
    )?;
    d.set_item("judged", plan.judged)?;
    d.set_item("judge_rpm", plan.judge_budget.0)?;
    d.set_item("judge_tpm", plan.judge_budget.1)?;
    Ok(d)
}

/// The metric stages, loaded once, for any number of in-memory datasets.
#[pyclass(module = "refscore._native")]
struct Scorer {
    inner: Mutex<refscore::Scorer>,
}

#[pymethods]
impl Scorer {
    #[new]
    fn new(py: Python<'_>, flags: Vec<String>) -> PyResult<Scorer> {
        let inner = py
            .detach(|| refscore::Scorer::new(&flags))
            .map_err(|e| to_py(py, e))?;
        Ok(Scorer {
            inner: Mutex::new(inner),
        })
    }

    /// Scores anything exporting `__arrow_c_stream__`; returns a
    /// `pyarrow.Table`. The stream is read with the GIL held (only moving
    /// buffers), then scored without it.
    fn score(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let reader = arrow::array::ffi_stream::RecordBatchStreamReader::from_pyarrow_bound(data)?;
        let schema = reader.schema();
        let batches = reader
            .collect::<Result<Vec<_>, ArrowError>>()
            .map_err(|e| to_py(py, Error::bad_input(format!("data: {e}"))))?;
        let scored = py.detach(|| {
            let mut scorer = self
                .inner
                .lock()
                .map_err(|_| Error::internal("an earlier call panicked"))?;
            scorer.score(&schema, &batches)
        });
        let (schema, out) = scored.map_err(|e| to_py(py, e))?;
        let table = Table::try_new(out, schema)
            .map_err(|e| PyRuntimeError::new_err(format!("result table: {e}")))?;
        Ok(table.into_pyarrow(py)?.unbind())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(score_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_class::<Scorer>()?;
    // The CLI's exit codes by class name, from the one table in Rust.
    let codes = pyo3::types::PyDict::new(m.py());
    for class in ErrorClass::ALL {
        codes.set_item(class.name(), class.exit_code())?;
    }
    m.add("EXIT_CODES", codes)?;
    // The metric registry, so Python code reads metrics as the CLI does.
    let metrics = pyo3::types::PyList::empty(m.py());
    for metric in refscore_core::metric::BUILTIN.iter() {
        let d = pyo3::types::PyDict::new(m.py());
        d.set_item("name", metric.name.as_str())?;
        d.set_item("group", metric.group.name())?;
        d.set_item("family", metric.family)?;
        d.set_item(
            "kind",
            match metric.kind {
                refscore_core::metric::Kind::Binary => "binary",
                refscore_core::metric::Kind::Score => "score",
            },
        )?;
        d.set_item("default_threshold", metric.default_threshold)?;
        d.set_item("columns", metric.output_columns().to_vec())?;
        d.set_item("reason_column", metric.reason_column.as_deref())?;
        d.set_item("source_column", metric.source_column.as_deref())?;
        metrics.append(d)?;
    }
    m.add("METRICS", metrics)?;
    Ok(())
}
