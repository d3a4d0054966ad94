//! Any Parquet dataset read by column name: result files, where there is no
//! reference or output to map. `report` reads runs through this, so finding
//! files, footers, corrupt-page messages and projection stay in one crate.

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use std::sync::Arc;

use refscore_core::Error;

use crate::source::{self, Failure, RowReader, Rows, SourceOptions};
use crate::{mapping, InputFile};

/// A set of Parquet files (a file, a directory or a glob) with one schema,
/// streamed column by column. Unlike [`crate::Dataset`] it maps no roles:
/// it exists for readers of files refscore wrote itself.
#[derive(Debug, Clone)]
pub struct Table {
    spec: String,
    files: Vec<InputFile>,
}

impl Table {
    /// Finds the files (local, in an object store, or a Delta table's
    /// latest version) and reads every footer.
    pub fn open(spec: &str) -> Result<Table, Error> {
        Table::open_with(spec, &SourceOptions::default())
    }

    /// [`Table::open`] with the source options given: a Delta table's
    /// version, or only the files one of its commits added.
    pub fn open_with(spec: &str, options: &SourceOptions) -> Result<Table, Error> {
        let listing = source::list(spec, options)?;
        if listing.files.is_empty() {
            return Err(Error::bad_input(format!(
                "{spec}: the table holds no files"
            )));
        }
        let files = listing
            .files
            .into_iter()
            .map(source::open)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Table {
            spec: spec.to_string(),
            files,
        })
    }

    /// The path or pattern the table was opened from, for messages.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The first file's schema (every column read is checked in every file).
    pub fn schema(&self) -> SchemaRef {
        self.files[0].schema.clone()
    }

    /// The value of `key` in the first file's footer metadata that has it.
    pub fn footer_value(&self, key: &str) -> Option<&str> {
        self.files.iter().find_map(|f| f.footer_value(key))
    }

    /// Rows over all files, from the footers.
    pub fn total_rows(&self) -> u64 {
        self.files.iter().map(|f| f.rows).sum()
    }

    /// The field of column `name` as it is read from every file (string
    /// kinds that differ between files read as LargeUtf8), or a one-line
    /// error naming the file that lacks it or disagrees.
    pub fn field(&self, name: &str) -> Result<Field, Error> {
        let mut out: Option<Field> = None;
        for file in &self.files {
            let f = file.schema.field_with_name(name).map_err(|_| {
                Error::bad_input(format!(
                    "{}: column '{name}' not found (columns: {})",
                    file.path.display(),
                    mapping::column_list(&file.schema)
                ))
            })?;
            out = Some(match out {
                None => f.clone(),
                Some(prev) if prev.data_type() == f.data_type() => prev,
                Some(prev)
                    if refscore_core::is_string_type(prev.data_type())
                        && refscore_core::is_string_type(f.data_type()) =>
                {
                    prev.with_data_type(DataType::LargeUtf8)
                }
                Some(prev) => {
                    return Err(Error::bad_input(format!(
                        "{}: column '{name}' has type {}, but an earlier file has {}",
                        file.path.display(),
                        f.data_type(),
                        prev.data_type()
                    )))
                }
            });
        }
        Ok(out.expect("a table has at least one file"))
    }

    /// Streams the named columns of every row, in file order, as record
    /// batches holding exactly those columns in that order.
    pub fn batches(&self, names: &[&str], batch_size: usize) -> Result<TableBatches<'_>, Error> {
        self.rows(names, batch_size, None)
    }

    /// Streams the named columns of the given rows only (ordinals across all
    /// files, ascending); pages holding none of them are skipped where the
    /// file allows.
    pub fn select(&self, names: &[&str], rows: &[u64]) -> Result<TableBatches<'_>, Error> {
        self.rows(names, 8192, Some(rows.to_vec()))
    }

    fn rows(
        &self,
        names: &[&str],
        batch_size: usize,
        rows: Option<Vec<u64>>,
    ) -> Result<TableBatches<'_>, Error> {
        let fields = names
            .iter()
            .map(|n| self.field(n))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TableBatches {
            table: self,
            names: names.iter().map(|s| s.to_string()).collect(),
            schema: Arc::new(Schema::new(fields)),
            batch_size: batch_size.max(1),
            rows,
            file: 0,
            first_row_of_file: 0,
            reader: None,
        })
    }
}

/// Record batches of some columns of a [`Table`]; see [`Table::batches`].
pub struct TableBatches<'a> {
    table: &'a Table,
    names: Vec<String>,
    schema: SchemaRef,
    batch_size: usize,
    rows: Option<Vec<u64>>,
    file: usize,
    first_row_of_file: u64,
    reader: Option<RowReader>,
}

impl TableBatches<'_> {
    fn reader_for(&self, file: &InputFile) -> Result<Option<RowReader>, Error> {
        let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
        let mut rows = Rows::default();
        if let Some(selected) = &self.rows {
            let start = self.first_row_of_file;
            let end = start + file.rows;
            let lo = selected.partition_point(|&r| r < start);
            let hi = selected.partition_point(|&r| r < end);
            if lo == hi {
                return Ok(None);
            }
            let mut selectors = Vec::new();
            let mut at = 0u64;
            for &r in &selected[lo..hi] {
                let r = r - start;
                if r < at {
                    continue; // a repeated ordinal
                }
                if r > at {
                    selectors.push(RowSelector::skip((r - at) as usize));
                }
                selectors.push(RowSelector::select(1));
                at = r + 1;
            }
            if at < file.rows {
                selectors.push(RowSelector::skip((file.rows - at) as usize));
            }
            rows.selection = Some(RowSelection::from(selectors));
        }
        source::open_rows(file, &names, rows, self.batch_size).map(Some)
    }
}

impl Iterator for TableBatches<'_> {
    type Item = Result<RecordBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let file = self.table.files.get(self.file)?;
            if self.reader.is_none() {
                match self.reader_for(file) {
                    Ok(Some(r)) => self.reader = Some(r),
                    Ok(None) => {
                        self.first_row_of_file += file.rows;
                        self.file += 1;
                        continue;
                    }
                    Err(e) => {
                        self.file = usize::MAX;
                        return Some(Err(e));
                    }
                }
            }
            match self.reader.as_mut().expect("set").next_batch() {
                Some(Ok(batch)) => {
                    // Projection keeps file order; put the columns in the
                    // order asked for, cast to the table-wide types.
                    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.names.len());
                    for (name, field) in self.names.iter().zip(self.schema.fields()) {
                        let a = batch.column_by_name(name).expect("projected").clone();
                        let a = if a.data_type() == field.data_type() {
                            a
                        } else {
                            match arrow::compute::cast(&a, field.data_type()) {
                                Ok(a) => a,
                                Err(e) => {
                                    self.file = usize::MAX;
                                    return Some(Err(Error::bad_input(format!(
                                        "{}: column '{name}': {e}",
                                        file.path.display()
                                    ))));
                                }
                            }
                        };
                        arrays.push(a);
                    }
                    let out = RecordBatch::try_new_with_options(
                        self.schema.clone(),
                        arrays,
                        &arrow::array::RecordBatchOptions::new()
                            .with_row_count(Some(batch.num_rows())),
                    );
                    return Some(out.map_err(|e| Error::internal(e.to_string())));
                }
                Some(Err(Failure::Store(e))) => {
                    self.file = usize::MAX;
                    return Some(Err(e));
                }
                Some(Err(Failure::Decode(e))) => {
                    let shown = file.path.display();
                    self.file = usize::MAX;
                    let what = if e.contains("CRC checksum mismatch") {
                        "page checksum mismatch (the file was damaged after it was written)"
                            .to_string()
                    } else {
                        e
                    };
                    return Some(Err(Error::bad_input(format!(
                        "{shown}: columns {}: {what}",
                        self.names.join(", ")
                    ))));
                }
                None => {
                    self.reader = None;
                    self.first_row_of_file += file.rows;
                    self.file += 1;
                }
            }
        }
    }
}
