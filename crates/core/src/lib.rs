//! The data that flows between refscore's pipeline stages.
//!
//! The reader produces [`RowBatch`]es; each metric stage (lexical, embedding,
//! judge) reads the text columns of a batch and returns [`ScoreColumns`]; the
//! writer stitches the id, the stages' columns and the row status together.
//! Keeping these types in one small crate lets the stages stay independent of
//! each other and of how Parquet is read or written.

pub mod entailment;
pub mod files;
pub mod given;
pub mod metric;
pub mod plan;
pub mod schema;

use std::sync::Arc;

pub use given::Given;
pub use plan::{FitInput, StagePlan};

use arrow::array::{
    Array, ArrayRef, AsArray, Int32Array, LargeStringArray, StringArray, StringViewArray,
};
use arrow::datatypes::{DataType, Field, FieldRef, Int32Type};

/// A string column of the input, whatever Arrow string encoding the file used.
///
/// Parquet writers differ (Utf8, LargeUtf8, Utf8View, dictionary-encoded, or
/// the Null type for a column that holds only nulls); the metric stages only
/// want `Option<&str>` per row, without copying the text.
#[derive(Debug, Clone)]
pub enum TextColumn {
    /// 32-bit offsets (`Utf8`).
    Utf8(StringArray),
    /// 64-bit offsets (`LargeUtf8`).
    Large(LargeStringArray),
    /// String views (`Utf8View`).
    View(StringViewArray),
    /// Dictionary-encoded: each row points at one of the distinct values,
    /// which are never expanded per row (one 70 KB value in 32k rows stays
    /// 70 KB).
    Dictionary(Int32Array, Box<TextColumn>),
    /// The Arrow `Null` type (pandas and Polars write an all-null column so):
    /// every row is null.
    Null(usize),
}

impl TextColumn {
    /// Wraps an Arrow array of a text type (see [`is_text_type`]). Returns
    /// `None` for any other type.
    pub fn from_array(array: &ArrayRef) -> Option<TextColumn> {
        match array.data_type() {
            DataType::Utf8 => Some(TextColumn::Utf8(array.as_string::<i32>().clone())),
            DataType::LargeUtf8 => Some(TextColumn::Large(array.as_string::<i64>().clone())),
            DataType::Utf8View => Some(TextColumn::View(array.as_string_view().clone())),
            DataType::Null => Some(TextColumn::Null(array.len())),
            DataType::Dictionary(_, value) if is_string_type(value) => {
                // Re-key to Int32 (keys only; the values are not expanded).
                let target = DataType::Dictionary(Box::new(DataType::Int32), value.clone());
                let dict = arrow::compute::cast(array, &target).ok()?;
                let dict = dict.as_dictionary::<Int32Type>();
                let values = TextColumn::from_array(dict.values())?;
                Some(TextColumn::Dictionary(
                    dict.keys().clone(),
                    Box::new(values),
                ))
            }
            _ => None,
        }
    }

    /// The text of row `i`, or `None` when it is null.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&str> {
        match self {
            TextColumn::Utf8(a) => a.is_valid(i).then(|| a.value(i)),
            TextColumn::Large(a) => a.is_valid(i).then(|| a.value(i)),
            TextColumn::View(a) => a.is_valid(i).then(|| a.value(i)),
            TextColumn::Dictionary(keys, values) => {
                if keys.is_valid(i) {
                    values.get(keys.value(i) as usize)
                } else {
                    None
                }
            }
            TextColumn::Null(_) => None,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            TextColumn::Utf8(a) => a.len(),
            TextColumn::Large(a) => a.len(),
            TextColumn::View(a) => a.len(),
            TextColumn::Dictionary(keys, _) => keys.len(),
            TextColumn::Null(n) => *n,
        }
    }

    /// True when the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// True for the Arrow string types: Utf8, LargeUtf8, Utf8View, and
/// dictionaries of those.
pub fn is_string_type(data_type: &DataType) -> bool {
    match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, value) => {
            matches!(
                **value,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        }
        _ => false,
    }
}

/// True for the types refscore reads as text: the string types, and the
/// Null type of a column that holds no value at all.
pub fn is_text_type(data_type: &DataType) -> bool {
    is_string_type(data_type) || *data_type == DataType::Null
}

/// One batch of input rows, as read from the dataset, in input order.
///
/// The reference and output are private so that whether each row can be
/// scored is worked out once, when the batch is built ([`RowBatch::new`],
/// [`RowBatch::set_answers`]), and every stage reads that one verdict.
#[derive(Debug, Clone)]
pub struct RowBatch {
    /// Ordinal (0-based, across all input files) of the first row of the batch.
    pub first_row: u64,
    /// The file the rows came from, for error messages.
    pub source: Arc<str>,
    /// Row ordinal of the first row within `source` (0-based).
    pub first_row_in_source: u64,
    /// The id column as it was in the input, or the row ordinals when the
    /// input has no id column.
    pub id: ArrayRef,
    /// The question/prompt, when the input has one.
    pub input: Option<TextColumn>,
    /// The ground-truth answer.
    reference: TextColumn,
    /// The model's answer being scored.
    output: TextColumn,
    /// Per row, why it cannot be scored (`None`: it can), from `reference`
    /// and `output`.
    unscorable: Vec<Option<Unscorable>>,
    /// Input columns the user asked to copy into the output unchanged.
    pub passthrough: Vec<ArrayRef>,
    /// The column that says per row which optional (judge) metrics to
    /// compute, when the user names one.
    pub row_filter: Option<ArrayRef>,
    /// Input columns that judge prompts read by name (`row.NAME`), with
    /// their names.
    pub prompt_columns: Vec<(String, ArrayRef)>,
}

/// Why a row cannot be scored at all; one byte per row, kept by [`RowBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unscorable {
    NullReference,
    EmptyReference,
    NullOutput,
}

impl Unscorable {
    /// The verdict for one row: a null reference, an empty (whitespace-only)
    /// reference, or a null output, checked in that order.
    fn of(reference: Option<&str>, output: Option<&str>) -> Option<Unscorable> {
        match (reference, output) {
            (None, _) => Some(Unscorable::NullReference),
            (Some(r), _) if r.trim().is_empty() => Some(Unscorable::EmptyReference),
            (_, None) => Some(Unscorable::NullOutput),
            _ => None,
        }
    }

    /// The message the writer puts in the row's `error` column.
    fn message(self) -> &'static str {
        match self {
            Unscorable::NullReference => "reference is null",
            Unscorable::EmptyReference => "reference is empty",
            Unscorable::NullOutput => "output is null",
        }
    }
}

impl RowBatch {
    /// A batch of the given texts, with no passthrough, row filter or prompt
    /// columns (set those fields afterwards). Works out each row's
    /// scorability here, once. `reference` and `output` must be as long as
    /// `id`.
    pub fn new(
        first_row: u64,
        source: Arc<str>,
        first_row_in_source: u64,
        id: ArrayRef,
        input: Option<TextColumn>,
        reference: TextColumn,
        output: TextColumn,
    ) -> RowBatch {
        let mut batch = RowBatch {
            first_row,
            source,
            first_row_in_source,
            id,
            input,
            reference: TextColumn::Null(0),
            output: TextColumn::Null(0),
            unscorable: Vec::new(),
            passthrough: Vec::new(),
            row_filter: None,
            prompt_columns: Vec::new(),
        };
        batch.set_answers(reference, output);
        batch
    }

    /// Replaces the reference and output of every row, and works out again
    /// which rows can be scored.
    pub fn set_answers(&mut self, reference: TextColumn, output: TextColumn) {
        debug_assert_eq!(reference.len(), output.len());
        self.unscorable = (0..reference.len())
            .map(|i| Unscorable::of(reference.get(i), output.get(i)))
            .collect();
        self.reference = reference;
        self.output = output;
    }

    /// The ground-truth answer of every row.
    pub fn reference(&self) -> &TextColumn {
        &self.reference
    }

    /// The model's answer of every row.
    pub fn output(&self) -> &TextColumn {
        &self.output
    }

    /// Number of rows in the batch.
    pub fn len(&self) -> usize {
        self.reference.len()
    }

    /// True when the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Why row `i` cannot be scored at all, if it cannot: a null reference, an
    /// empty (whitespace-only) reference, or a null output. Every metric stage
    /// leaves such rows null and the writer marks them `status = error`.
    /// Worked out when the batch was built; this only looks it up.
    pub fn unscorable(&self, i: usize) -> Option<&'static str> {
        self.unscorable[i].map(Unscorable::message)
    }
}

/// The columns one metric stage computed for a batch, plus any per-row
/// failures of that stage (which make the row's status `partial`).
#[derive(Debug, Clone, Default)]
pub struct ScoreColumns {
    /// Output fields, in the order they appear in the result file.
    pub fields: Vec<FieldRef>,
    /// One array per field, each as long as the batch.
    pub arrays: Vec<ArrayRef>,
    /// Per-row failure messages of this stage (`None` = no failure). Empty
    /// when the stage had no failures at all in this batch.
    pub row_errors: Vec<Option<String>>,
    /// Rows of this batch that failed for a reason worth retrying later (a
    /// judge that was down): a resumed run scores them again.
    pub retryable_rows: u64,
    /// Why the first of those rows failed, for the message that asks for a
    /// retry (other rows may have failed for good before it).
    pub retry_reason: Option<String>,
}

impl ScoreColumns {
    /// Appends one column.
    pub fn push(&mut self, field: Field, array: ArrayRef) {
        debug_assert_eq!(field.data_type(), array.data_type());
        self.fields.push(Arc::new(field));
        self.arrays.push(array);
    }

    /// Records a failure for row `i` of a batch of `len` rows.
    pub fn fail_row(&mut self, len: usize, i: usize, message: String) {
        if self.row_errors.is_empty() {
            self.row_errors = vec![None; len];
        }
        match &mut self.row_errors[i] {
            Some(existing) => {
                existing.push_str("; ");
                existing.push_str(&message);
            }
            slot @ None => *slot = Some(message),
        }
    }

    /// The column named `name`, if a stage produced it.
    pub fn column(&self, name: &str) -> Option<&ArrayRef> {
        self.fields
            .iter()
            .position(|f| f.name() == name)
            .map(|k| &self.arrays[k])
    }

    /// Appends all columns and row failures of `other` after this one's.
    pub fn extend(&mut self, other: ScoreColumns) {
        let len = other
            .arrays
            .first()
            .map(|a| a.len())
            .unwrap_or(other.row_errors.len());
        self.retryable_rows += other.retryable_rows;
        if self.retry_reason.is_none() {
            self.retry_reason = other.retry_reason;
        }
        self.fields.extend(other.fields);
        self.arrays.extend(other.arrays);
        for (i, e) in other.row_errors.into_iter().enumerate() {
            if let Some(e) = e {
                self.fail_row(len, i, e);
            }
        }
    }
}

/// A metric stage (lexical, embedding, judge): it names the columns it adds
/// and turns each batch into those columns. The job layer drives every stage
/// the same way, whether rows come from a file, a shard or a resumed run.
pub trait Stage: Send {
    /// The columns this stage adds to the result, in order.
    fn fields(&self) -> Vec<Field>;

    /// Scores one batch. `earlier` holds the columns of the stages that ran
    /// before this one on the same batch (the judge's cascade reads cosine).
    fn score(&mut self, batch: &RowBatch, earlier: &ScoreColumns) -> Result<ScoreColumns, Error>;

    /// What the stage adds to the run summary, under its key (its model,
    /// counters, timings), once the run is done; `None` adds nothing.
    fn summary(&self) -> Option<(&'static str, serde_json::Value)> {
        None
    }

    /// Fits the stage to the input it is about to score, before its first
    /// batch (IDF weights, an `auto` baseline); most stages fit nothing.
    fn fit(&mut self, _input: &dyn FitInput) -> Result<(), Error> {
        Ok(())
    }
}

/// Runs `stages` in order over one batch, each seeing the columns of the
/// ones before it: the one way every caller (a job over files, a scorer over
/// in-memory batches) turns a batch into its metric columns.
pub fn score_stages(
    stages: &mut [&mut dyn Stage],
    batch: &RowBatch,
) -> Result<ScoreColumns, Error> {
    let mut scores = ScoreColumns::default();
    for stage in stages.iter_mut() {
        let more = stage.score(batch, &scores)?;
        scores.extend(more);
    }
    Ok(scores)
}

/// What kind of failure an error is, so that the CLI can turn it into a
/// documented exit code without knowing each crate's error types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The command line is wrong: an unknown flag, a malformed or out-of-range value.
    Usage,
    /// The input data is wrong: not Parquet, corrupt, missing or mistyped column.
    BadInput,
    /// The settings are inconsistent, or the environment cannot serve them:
    /// ambiguous mapping, output exists, no CUDA for `--device cuda`, a bad
    /// config file.
    Config,
    /// The operating system refused: missing path, permissions, disk full.
    Io,
    /// A failure worth retrying later: a service that is down or overloaded.
    Temporary,
    /// An input that does not exist: an object, a prefix or a bucket.
    Missing,
    /// A store that could not be reached, after its retries.
    Unavailable,
    /// A store that refused the credentials it was given.
    Denied,
    /// A bug or an unexpected failure inside refscore or a library it uses.
    Internal,
}

impl ErrorClass {
    /// Every class, in the order of their exit codes.
    pub const ALL: [ErrorClass; 9] = [
        ErrorClass::Usage,
        ErrorClass::BadInput,
        ErrorClass::Missing,
        ErrorClass::Unavailable,
        ErrorClass::Internal,
        ErrorClass::Io,
        ErrorClass::Temporary,
        ErrorClass::Denied,
        ErrorClass::Config,
    ];

    /// The process exit code of this class (sysexits.h values). The one
    /// table of exit codes: `--help` and the Python package's constants are
    /// made from it, and docs/usage.md's table is checked against `--help`
    /// (tests/python/test_docs_flags.py).
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorClass::Usage => 64,
            ErrorClass::BadInput => 65,
            ErrorClass::Internal => 70,
            ErrorClass::Io => 74,
            ErrorClass::Temporary => 75,
            ErrorClass::Missing => 66,
            ErrorClass::Unavailable => 69,
            ErrorClass::Denied => 77,
            ErrorClass::Config => 78,
        }
    }

    /// A short name, for the Python package's constants.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Usage => "usage",
            ErrorClass::BadInput => "bad_input",
            ErrorClass::Internal => "internal",
            ErrorClass::Io => "io",
            ErrorClass::Temporary => "temporary",
            ErrorClass::Missing => "missing",
            ErrorClass::Unavailable => "unavailable",
            ErrorClass::Denied => "denied",
            ErrorClass::Config => "config",
        }
    }

    /// What the code means, for `--help`.
    pub fn meaning(self) -> &'static str {
        match self {
            ErrorClass::Usage => {
                "bad command line (unknown flag, malformed or out-of-range value: an unknown \
                 metric, --device tpu, a --max-seq-length past the model's limit)"
            }
            ErrorClass::BadInput => {
                "bad input data (not Parquet, corrupt page or page checksum, missing or \
                 non-string column)"
            }
            ErrorClass::Internal => "internal error (a bug: please report it)",
            ErrorClass::Io => {
                "I/O error (path missing or unreadable, output directory missing, disk full)"
            }
            ErrorClass::Temporary => {
                "temporary failure, try again later: the judge is unreachable, rows still \
                 lack judge metrics (the output holds everything else), or judge batches \
                 were submitted or are still running (re-run with --resume)"
            }
            ErrorClass::Missing => {
                "no such input in the object store: the object, prefix or bucket does not exist"
            }
            ErrorClass::Unavailable => {
                "the object store could not be reached after its retries (--store-retries)"
            }
            ErrorClass::Denied => {
                "the object store refused the credentials (AWS_*, GOOGLE_*, AZURE_*)"
            }
            ErrorClass::Config => {
                "bad configuration (ambiguous columns, output exists, output is an input, an \
                 interrupted run is left (use --resume or --overwrite), --resume with changed \
                 inputs or settings, judge refused the key or model (at the start, or every \
                 request of the run), a device this build or \
                 machine cannot serve, bad config file)"
            }
        }
    }
}

/// An error that knows its [`ErrorClass`] and carries a one-line message
/// naming the file, column and row it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure this is.
    pub class: ErrorClass,
    /// One line for the user.
    pub message: String,
}

impl Error {
    /// Bad input data.
    pub fn bad_input(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::BadInput,
            message: one_line(message.into()),
        }
    }
    /// A bad command-line value.
    pub fn usage(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Usage,
            message: one_line(message.into()),
        }
    }
    /// Bad settings.
    pub fn config(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Config,
            message: one_line(message.into()),
        }
    }
    /// Operating-system failure.
    pub fn io(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Io,
            message: one_line(message.into()),
        }
    }
    /// Internal failure (a bug, or a library failing unexpectedly).
    pub fn internal(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Internal,
            message: one_line(message.into()),
        }
    }
    /// An input that does not exist in its object store.
    pub fn missing(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Missing,
            message: one_line(message.into()),
        }
    }
    /// An object store out of reach after its retries.
    pub fn unavailable(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Unavailable,
            message: one_line(message.into()),
        }
    }
    /// An object store that refused the credentials.
    pub fn denied(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Denied,
            message: one_line(message.into()),
        }
    }
    /// Temporary failure.
    pub fn temporary(message: impl Into<String>) -> Error {
        Error {
            class: ErrorClass::Temporary,
            message: one_line(message.into()),
        }
    }
}

/// A message as one line: a library's captured backtrace (Candle's
/// errors carry one when `RUST_BACKTRACE` is set) cut off, and any other
/// line breaks joined, so that every error stays one line for the user and
/// for logs that read one line per failure.
pub fn one_line(message: String) -> String {
    if !message.contains(['\n', '\r']) {
        return message;
    }
    let mut kept: Vec<&str> = Vec::new();
    for line in message.split(['\n', '\r']) {
        let t = line.trim();
        // A backtrace: Rust's header, or its indented "N: frame" lines.
        let frame = line.starts_with(' ')
            && t.split_once(':')
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !kept.is_empty() && (frame || t.to_ascii_lowercase().starts_with("stack backtrace")) {
            break;
        }
        if !t.is_empty() {
            kept.push(t);
        }
    }
    kept.join(" ")
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{DictionaryArray, NullArray, UInt64Array};

    fn texts(values: &[Option<&str>]) -> TextColumn {
        TextColumn::Utf8(StringArray::from(values.to_vec()))
    }

    #[test]
    fn scorability_is_worked_out_when_the_batch_is_built() {
        let reference = texts(&[None, Some("  \n"), Some("r"), Some("r"), None]);
        let output = texts(&[Some("o"), Some("o"), None, Some(""), None]);
        let mut batch = RowBatch::new(
            0,
            "in.parquet".into(),
            0,
            Arc::new(UInt64Array::from_iter_values(0..5)) as ArrayRef,
            None,
            reference,
            output,
        );
        let why: Vec<_> = (0..5).map(|i| batch.unscorable(i)).collect();
        assert_eq!(
            why,
            [
                Some("reference is null"),
                Some("reference is empty"),
                Some("output is null"),
                None,
                Some("reference is null"),
            ]
        );
        batch.set_answers(
            texts(&[Some("r"); 5]),
            texts(&[Some("o"), None, Some("o"), Some("o"), Some("o")]),
        );
        let why: Vec<_> = (0..5).map(|i| batch.unscorable(i)).collect();
        assert_eq!(why, [None, Some("output is null"), None, None, None]);
    }

    #[test]
    fn an_error_is_one_line_whatever_a_library_put_in_it() {
        // As Candle displays an error with RUST_BACKTRACE=1.
        let candle = "cannot find tensor embeddings.word_embeddings.weight\n   0: candle_core::error::Error::bt\n             at src/error.rs:10:5\n   1: refscore_embed::load\n";
        let e = Error::config(format!("model.safetensors: {candle}"));
        assert_eq!(
            e.message,
            "model.safetensors: cannot find tensor embeddings.word_embeddings.weight"
        );
        let e = Error::internal("first\nStack backtrace:\n  at x");
        assert_eq!(e.to_string(), "first");
        let e = Error::bad_input("a\r\n  b\n\nc: 3");
        assert_eq!(e.message, "a b c: 3");
        // Lines that only look like numbered frames are message, not trace.
        let e = Error::io("12:00 batch\n8080: refused\n2001:db8::1 unreachable");
        assert_eq!(
            e.message,
            "12:00 batch 8080: refused 2001:db8::1 unreachable"
        );
        assert_eq!(Error::io("first\rsecond").message, "first second");
        assert_eq!(Error::usage("plain").message, "plain");
    }
    use arrow::datatypes::UInt16Type;
    use std::sync::Arc;

    #[test]
    fn dictionary_text_is_read_without_expanding_it() {
        let big = "x".repeat(70_000);
        let keys = arrow::array::UInt16Array::from(vec![0u16; 32_768]);
        let values: ArrayRef = Arc::new(StringArray::from(vec![big.as_str()]));
        let dict: ArrayRef =
            Arc::new(DictionaryArray::<UInt16Type>::try_new(keys, values).unwrap());
        let col = TextColumn::from_array(&dict).unwrap();
        assert_eq!(col.len(), 32_768);
        assert_eq!(col.get(32_767), Some(big.as_str()));
        let TextColumn::Dictionary(_, values) = &col else {
            panic!("kept as a dictionary")
        };
        assert_eq!(values.len(), 1, "the value is held once");
    }

    #[test]
    fn the_null_type_reads_as_all_null_text() {
        let a: ArrayRef = Arc::new(NullArray::new(3));
        let col = TextColumn::from_array(&a).unwrap();
        assert_eq!((col.len(), col.get(2)), (3, None));
        assert!(is_text_type(&DataType::Null) && !is_string_type(&DataType::Null));
    }
}
