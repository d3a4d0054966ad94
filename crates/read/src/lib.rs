//! Reading the input dataset (SPEC §1).
//!
//! [`Dataset::open`] finds the files (a file, a directory or a glob), reads
//! every footer, resolves the column mapping and checks the column types
//! before any work starts; [`Dataset::batches`] then streams [`RowBatch`]es,
//! projecting only the columns it needs, so memory does not grow with the
//! number of rows.

mod files;
mod mapping;
mod quiet_panic;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, SchemaRef};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use refscore_batch::{Error, RowBatch, TextColumn};

pub use mapping::{ColumnMapping, ResolvedColumns, Role, ALIASES};

/// How to read a dataset.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Which columns play which role (`None` = default name or alias).
    pub mapping: ColumnMapping,
    /// Input columns to copy into the output unchanged.
    pub keep: Vec<String>,
    /// Rows per record batch.
    pub batch_size: usize,
    /// A column saying per row which optional metrics to run (`--judge-where`):
    /// boolean, string, or list of strings.
    pub row_filter: Option<String>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            mapping: ColumnMapping::default(),
            keep: Vec::new(),
            batch_size: 32 * 1024,
            row_filter: None,
        }
    }
}

/// One input file with what its footer told us.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// Where it is.
    pub path: PathBuf,
    /// Rows, from the footer.
    pub rows: u64,
    /// Its Arrow schema.
    pub schema: SchemaRef,
}

/// An opened, validated input dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    files: Vec<InputFile>,
    columns: ResolvedColumns,
    keep: Vec<String>,
    keep_fields: Vec<Field>,
    id_field: Field,
    batch_size: usize,
    row_filter: Option<String>,
}

impl Dataset {
    /// Finds the files named by `spec` (a file, a directory or a glob), reads
    /// their footers, and checks that every mapped column exists with a
    /// usable type in every file.
    pub fn open(spec: &str, options: &ReadOptions) -> Result<Dataset, Error> {
        let paths = files::discover(spec)?;
        let mut files_meta = Vec::with_capacity(paths.len());
        for path in paths {
            files_meta.push(files::read_footer(&path)?);
        }
        let first = &files_meta[0];
        let columns = mapping::resolve(&options.mapping, &first.schema, &first.path)?;
        let mut keep_fields = Vec::new();
        for name in &options.keep {
            let field = first.schema.field_with_name(name).map_err(|_| {
                Error::bad_input(format!(
                    "{}: --keep column '{name}' not found (columns: {})",
                    first.path.display(),
                    mapping::column_list(&first.schema)
                ))
            })?;
            keep_fields.push(field.as_ref().clone());
        }
        let id_field = match &columns.id {
            Some(name) => first
                .schema
                .field_with_name(name)
                .expect("resolved")
                .clone(),
            None => Field::new("id", DataType::UInt64, false),
        };
        if let Some(name) = &options.row_filter {
            let field = first.schema.field_with_name(name).map_err(|_| {
                Error::bad_input(format!(
                    "{}: --judge-where column '{name}' not found (columns: {})",
                    first.path.display(),
                    mapping::column_list(&first.schema)
                ))
            })?;
            let ok = match field.data_type() {
                DataType::Boolean => true,
                DataType::List(item) | DataType::LargeList(item) => {
                    refscore_batch::is_string_type(item.data_type())
                }
                t => refscore_batch::is_string_type(t),
            };
            if !ok {
                return Err(Error::bad_input(format!(
                    "{}: --judge-where column '{name}' has type {}; expected boolean, string or list of strings",
                    first.path.display(),
                    field.data_type()
                )));
            }
        }
        for file in &files_meta[1..] {
            mapping::check_same(&columns, &first.schema, file)?;
            if let Some(name) = &options.row_filter {
                check_same_type(file, first.schema.field_with_name(name).expect("checked"))?;
            }
            for f in &keep_fields {
                check_same_type(file, f)?;
            }
        }
        Ok(Dataset {
            files: files_meta,
            columns,
            keep: options.keep.clone(),
            keep_fields,
            id_field,
            batch_size: options.batch_size.max(1),
            row_filter: options.row_filter.clone(),
        })
    }

    /// The input files, in the order they are read.
    pub fn files(&self) -> &[InputFile] {
        &self.files
    }

    /// Total rows over all files, from the footers.
    pub fn total_rows(&self) -> u64 {
        self.files.iter().map(|f| f.rows).sum()
    }

    /// Which input column plays which role.
    pub fn columns(&self) -> &ResolvedColumns {
        &self.columns
    }

    /// The `id` column's field as it will appear in the output: the input's
    /// id type renamed to `id`, or UInt64 row ordinals.
    pub fn id_field(&self) -> Field {
        Field::new(
            "id",
            self.id_field.data_type().clone(),
            self.id_field.is_nullable(),
        )
    }

    /// The fields of the columns passed through (`--keep`).
    pub fn keep_fields(&self) -> &[Field] {
        &self.keep_fields
    }

    /// Streams the rows of every file, in order, as [`RowBatch`]es.
    pub fn batches(&self) -> Batches<'_> {
        Batches {
            dataset: self,
            file: 0,
            reader: None,
            row: 0,
            row_in_file: 0,
        }
    }

    /// Streams one text column alone (e.g. the references, for IDF weights),
    /// reading nothing else.
    pub fn text_column(&self, role: Role) -> Result<Option<TextColumns<'_>>, Error> {
        let Some(name) = self.columns.name(role) else {
            return Ok(None);
        };
        Ok(Some(TextColumns {
            dataset: self,
            name: name.to_string(),
            file: 0,
            reader: None,
        }))
    }

    fn open_reader(
        &self,
        file: &InputFile,
        names: &[&str],
    ) -> Result<ParquetRecordBatchReader, Error> {
        let handle = File::open(&file.path)
            .map_err(|e| Error::io(format!("{}: cannot open: {e}", file.path.display())))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(handle)
            .map_err(|e| Error::bad_input(format!("{}: {e}", file.path.display())))?;
        let parquet_schema = builder.parquet_schema();
        let roots: Vec<usize> = names
            .iter()
            .map(|n| file.schema.index_of(n).expect("validated when opened"))
            .collect();
        let mask = ProjectionMask::roots(parquet_schema, roots);
        builder
            .with_projection(mask)
            .with_batch_size(self.batch_size)
            .build()
            .map_err(|e| Error::bad_input(format!("{}: {e}", file.path.display())))
    }

    fn needed_columns(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for n in self
            .columns
            .id
            .iter()
            .chain(&self.columns.input)
            .chain([&self.columns.reference, &self.columns.output])
            .chain(&self.keep)
            .chain(&self.row_filter)
        {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
        names
    }

    fn to_row_batch(
        &self,
        file: &InputFile,
        batch: &RecordBatch,
        first_row: u64,
        row_in_file: u64,
    ) -> Result<RowBatch, Error> {
        let col = |name: &str| -> &ArrayRef { batch.column_by_name(name).expect("projected") };
        let text = |name: &str| -> Result<TextColumn, Error> {
            TextColumn::from_array(col(name)).ok_or_else(|| {
                Error::bad_input(format!(
                    "{}: column '{name}' has type {}, expected a string type",
                    file.path.display(),
                    col(name).data_type()
                ))
            })
        };
        let id: ArrayRef = match &self.columns.id {
            Some(name) => col(name).clone(),
            None => Arc::new(UInt64Array::from_iter_values(
                first_row..first_row + batch.num_rows() as u64,
            )),
        };
        Ok(RowBatch {
            first_row,
            source: Arc::from(file.path.display().to_string()),
            first_row_in_source: row_in_file,
            id,
            input: self.columns.input.as_deref().map(text).transpose()?,
            reference: text(&self.columns.reference)?,
            output: text(&self.columns.output)?,
            passthrough: self.keep.iter().map(|k| col(k).clone()).collect(),
            row_filter: self.row_filter.as_deref().map(|k| {
                let a = col(k);
                match a.data_type() {
                    DataType::Dictionary(_, v) => {
                        arrow::compute::cast(a, v).unwrap_or_else(|_| a.clone())
                    }
                    _ => a.clone(),
                }
            }),
        })
    }
}

fn check_same_type(file: &InputFile, expected: &Field) -> Result<(), Error> {
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

/// Decodes the next record batch. The Parquet decoder can panic on corrupt
/// pages instead of returning an error; that panic is turned into an error
/// here (and kept off stderr) so a corrupt file is reported as bad input.
fn decode_next(reader: &mut ParquetRecordBatchReader) -> Option<Result<RecordBatch, String>> {
    match quiet_panic::catch(|| reader.next()) {
        Ok(next) => next.map(|r| r.map_err(|e| e.to_string())),
        Err(panic) => Some(Err(format!("the decoder failed ({panic})"))),
    }
}

/// Iterator over the dataset's [`RowBatch`]es; see [`Dataset::batches`].
pub struct Batches<'a> {
    dataset: &'a Dataset,
    file: usize,
    reader: Option<ParquetRecordBatchReader>,
    row: u64,
    row_in_file: u64,
}

impl Iterator for Batches<'_> {
    type Item = Result<RowBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let file = self.dataset.files.get(self.file)?;
            if self.reader.is_none() {
                match self
                    .dataset
                    .open_reader(file, &self.dataset.needed_columns())
                {
                    Ok(r) => self.reader = Some(r),
                    Err(e) => {
                        self.file = usize::MAX - 1;
                        return Some(Err(e));
                    }
                }
                self.row_in_file = 0;
            }
            match decode_next(self.reader.as_mut().expect("set")) {
                Some(Ok(batch)) => {
                    let rb = self
                        .dataset
                        .to_row_batch(file, &batch, self.row, self.row_in_file);
                    self.row += batch.num_rows() as u64;
                    self.row_in_file += batch.num_rows() as u64;
                    return Some(rb);
                }
                Some(Err(e)) => {
                    self.file = usize::MAX - 1;
                    return Some(Err(Error::bad_input(format!(
                        "{}: cannot decode rows from {} on: {e}",
                        file.path.display(),
                        self.row_in_file
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
    dataset: &'a Dataset,
    name: String,
    file: usize,
    reader: Option<ParquetRecordBatchReader>,
}

impl Iterator for TextColumns<'_> {
    type Item = Result<TextColumn, Error>;

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
            }
            match decode_next(self.reader.as_mut().expect("set")) {
                Some(Ok(batch)) => {
                    return Some(TextColumn::from_array(batch.column(0)).ok_or_else(|| {
                        Error::bad_input(format!(
                            "{}: column '{}' is not a string column",
                            file.path.display(),
                            self.name
                        ))
                    }))
                }
                Some(Err(e)) => {
                    self.file = usize::MAX - 1;
                    return Some(Err(Error::bad_input(format!(
                        "{}: {e}",
                        file.path.display()
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

/// Reads just the schema and row count of one Parquet file (for `inspect`).
pub fn inspect_file(path: &Path) -> Result<InputFile, Error> {
    files::read_footer(path)
}
