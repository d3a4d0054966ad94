//! Streaming a dataset: the per-file reading units, the iterators over
//! row batches and single columns, and the conversions each batch goes
//! through (dictionary text, row filters, types unified across files).

use super::*;

/// Asks the Parquet reader for dictionary arrays for the text columns whose
/// every data page, in every row group, is dictionary-encoded: such a column
/// then reaches the metrics as one copy of each distinct value plus indices,
/// never expanded per row (one 70 KB answer repeated in 32k rows stays 70 KB,
/// where expanding it would need 2.3 GB and overflow a string array). Free,
/// since those pages hold exactly that. Columns also passed through with
/// --keep are left alone (they are copied as they are).
pub(crate) fn read_dictionary_text_as_dictionary(
    file: &mut InputFile,
    columns: &[String],
    keep: &[String],
) -> Result<(), Error> {
    use parquet::basic::Encoding;
    if file.table_file.is_some() {
        // A table's file reads through the kernel's plan, which wants the
        // table's types (a dictionary hint is not one).
        return Ok(());
    }
    let metadata = file.meta.metadata().clone();
    let all_dictionary = |name: &str| {
        metadata.row_groups().iter().all(|rg| {
            rg.columns().iter().any(|c| {
                c.column_path().parts() == [name.to_string()]
                    && c.dictionary_page_offset().is_some()
                    && c.page_encoding_stats_mask().is_some_and(|m| {
                        m.is_only(Encoding::PLAIN_DICTIONARY) || m.is_only(Encoding::RLE_DICTIONARY)
                    })
            })
        }) && !metadata.row_groups().is_empty()
    };
    let mut changed = false;
    let own = Arc::clone(file.meta.schema());
    let fields: Vec<Field> = own
        .fields()
        .iter()
        .map(|f| {
            let hint = matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8)
                && columns.iter().any(|c| c == f.name())
                && !keep.iter().any(|k| k == f.name())
                && all_dictionary(f.name());
            if hint {
                changed = true;
                let t = DataType::Dictionary(
                    Box::new(DataType::Int32),
                    Box::new(f.data_type().clone()),
                );
                f.as_ref().clone().with_data_type(t)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    if changed {
        let schema = Arc::new(Schema::new_with_metadata(fields, own.metadata().clone()));
        file.meta =
            ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new().with_schema(schema))
                .map_err(|e| Error::bad_input(format!("{}: {e}", file.path.display())))?;
        file.schema = file.full_schema(file.meta.schema());
    }
    Ok(())
}

/// The row-filter column as stages read it: dictionary-encoded values
/// decoded (their value type is boolean, string or list, checked on open).
pub(crate) fn plain_row_filter(array: &ArrayRef) -> ArrayRef {
    match array.data_type() {
        DataType::Dictionary(_, v) => {
            arrow::compute::cast(array, v).unwrap_or_else(|_| array.clone())
        }
        _ => array.clone(),
    }
}

/// The type a passed-through column (id, --keep) gets in the output when
/// files disagree: string kinds (DuckDB's Utf8, Polars' LargeUtf8, views,
/// dictionaries) become LargeUtf8; any other difference is an error.
pub(crate) fn unify(file: &InputFile, so_far: &Field) -> Result<Field, Error> {
    let theirs = file.schema.field_with_name(so_far.name()).map_err(|_| {
        Error::bad_input(format!(
            "{}: column '{}' not found (columns: {})",
            file.path.display(),
            so_far.name(),
            mapping::column_list(&file.schema)
        ))
    })?;
    if theirs.data_type() == so_far.data_type() {
        return Ok(so_far.clone());
    }
    let text = |t: &DataType| refscore_core::is_string_type(t);
    if text(theirs.data_type()) && text(so_far.data_type()) {
        return Ok(so_far.clone().with_data_type(DataType::LargeUtf8));
    }
    Err(Error::bad_input(format!(
        "{}: column '{}' has type {}, but an earlier file has {}",
        file.path.display(),
        so_far.name(),
        theirs.data_type(),
        so_far.data_type()
    )))
}

/// Casts a passed-through column to the type the output has for it.
pub(crate) fn conform(array: &ArrayRef, field: &Field, source: &Path) -> Result<ArrayRef, Error> {
    if array.data_type() == field.data_type() {
        return Ok(array.clone());
    }
    arrow::compute::cast(array, field.data_type()).map_err(|e| {
        Error::bad_input(format!(
            "{}: column '{}': {e}",
            source.display(),
            field.name()
        ))
    })
}

pub(crate) fn check_same_type(file: &InputFile, expected: &Field) -> Result<(), Error> {
    match file.schema.field_with_name(expected.name()) {
        Ok(f) if f.data_type() == expected.data_type() => Ok(()),
        Ok(f) => Err(Error::bad_input(format!(
            "{}: column '{}' has type {}, but the first file has {}",
            file.path.display(),
            expected.name(),
            f.data_type(),
            expected.data_type()
        ))),
        Err(_) => Err(Error::bad_input(format!(
            "{}: column '{}' not found (columns: {})",
            file.path.display(),
            expected.name(),
            mapping::column_list(&file.schema)
        ))),
    }
}

/// One unit of work: consecutive row groups of one input file (see
/// [`Dataset::units`]). Units are numbered in read order; shards and resumed
/// runs select units and row ranges of them, so every run cuts its batches
/// at the same rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// Index into [`Dataset::files`].
    pub file: usize,
    /// First row group within that file.
    pub row_group: usize,
    /// How many consecutive row groups (at least one).
    pub row_groups: usize,
    /// Ordinal of the unit's first row in the whole input.
    pub first_row: u64,
    /// Rows in the unit.
    pub rows: u64,
}

/// Rows `from..to` (within the unit) of one unit, as [`RowBatch`]es; see
/// [`Dataset::read_unit`].
pub struct UnitBatches<'a> {
    pub(crate) dataset: &'a Dataset,
    pub(crate) unit: Unit,
    pub(crate) from: u64,
    pub(crate) reader: Option<RowReader>,
    pub(crate) failed: bool,
}

impl Iterator for UnitBatches<'_> {
    type Item = Result<RowBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let file = &self.dataset.files[self.unit.file];
        let next = self.reader.as_mut()?.next_batch();
        match next {
            None => {
                self.reader = None;
                None
            }
            Some(Ok(batch)) => {
                let row_in_unit = self.from;
                self.from += batch.num_rows() as u64;
                let row_in_file = file.row_group_start(self.unit.row_group) + row_in_unit;
                Some(self.dataset.layout.row_batch(
                    &batch,
                    &file.path,
                    self.unit.first_row + row_in_unit,
                    row_in_file,
                ))
            }
            Some(Err(Failure::Store(e))) => {
                self.failed = true;
                Some(Err(e))
            }
            Some(Err(Failure::Decode(e))) => {
                self.failed = true;
                Some(Err(self.dataset.explain_decode_error(&self.unit, &e)))
            }
        }
    }
}

/// Iterator over the dataset's [`RowBatch`]es, unit after unit; see
/// [`Dataset::batches`].
pub struct Batches<'a> {
    pub(crate) dataset: &'a Dataset,
    pub(crate) units: std::vec::IntoIter<Unit>,
    pub(crate) current: Option<UnitBatches<'a>>,
}

impl Iterator for Batches<'_> {
    type Item = Result<RowBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(cur) = self.current.as_mut() {
                match cur.next() {
                    Some(Err(e)) => {
                        self.units = Vec::new().into_iter();
                        self.current = None;
                        return Some(Err(e));
                    }
                    Some(ok) => return Some(ok),
                    None => self.current = None,
                }
            }
            let unit = self.units.next()?;
            match self.dataset.read_unit(&unit, 0, unit.rows) {
                Ok(b) => self.current = Some(b),
                Err(e) => {
                    self.units = Vec::new().into_iter();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Iterator over one column of every file, in read order; see
/// [`Dataset::column`].
pub struct ColumnBatches<'a> {
    pub(crate) dataset: &'a Dataset,
    pub(crate) name: String,
    pub(crate) file: usize,
    pub(crate) row_in_file: u64,
    pub(crate) reader: Option<RowReader>,
    pub(crate) row_filter: bool,
}

/// A batch of one column, with where its rows came from (for messages).
pub struct ColumnBatch {
    /// The values.
    pub array: ArrayRef,
    /// The file they came from.
    pub source: PathBuf,
    /// Row ordinal, within that file, of the first value.
    pub first_row_in_source: u64,
}

impl Iterator for ColumnBatches<'_> {
    type Item = Result<ColumnBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let file = self.dataset.files.get(self.file)?;
            if self.reader.is_none() {
                match self.dataset.open_reader(file, &[self.name.as_str()]) {
                    Ok(r) => self.reader = Some(r),
                    Err(e) => {
                        self.file = usize::MAX - 1;
                        return Some(Err(e));
                    }
                }
                self.row_in_file = 0;
            }
            match self.reader.as_mut().expect("set").next_batch() {
                Some(Ok(batch)) => {
                    let first = self.row_in_file;
                    self.row_in_file += batch.num_rows() as u64;
                    let array = batch.column(0);
                    return Some(Ok(ColumnBatch {
                        array: if self.row_filter {
                            plain_row_filter(array)
                        } else {
                            array.clone()
                        },
                        source: file.path.clone(),
                        first_row_in_source: first,
                    }));
                }
                Some(Err(Failure::Store(e))) => {
                    self.file = usize::MAX - 1;
                    return Some(Err(e));
                }
                Some(Err(Failure::Decode(e))) => {
                    self.file = usize::MAX - 1;
                    return Some(Err(Error::bad_input(format!(
                        "{}: column '{}': {e}",
                        file.path.display(),
                        self.name
                    ))));
                }
                None => {
                    self.reader = None;
                    self.file += 1;
                }
            }
        }
    }
}

/// Iterator over one text column of every file; see [`Dataset::text_column`].
pub struct TextColumns<'a> {
    pub(crate) inner: ColumnBatches<'a>,
}

impl Iterator for TextColumns<'_> {
    type Item = Result<TextColumn, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.inner.next()? {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        Some(TextColumn::from_array(&batch.array).ok_or_else(|| {
            Error::bad_input(format!(
                "{}: column '{}' is not a string column",
                batch.source.display(),
                self.inner.name
            ))
        }))
    }
}
