//! Reading the input dataset (docs/metrics.md#input).
//!
//! [`Dataset::open`] finds the files (a file, a directory or a glob, local
//! or in an object store, or a Delta table's active files: [`source`]), reads
//! every footer, resolves the column mapping and checks the column types
//! before any work starts; [`Dataset::batches`] then streams [`RowBatch`]es,
//! projecting only the columns it needs, so memory does not grow with the
//! number of rows.

mod files;
mod layout;
mod mapping;
mod quiet_panic;
pub mod source;
mod stream;
mod table;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, RowSelection, RowSelector,
};
use refscore_core::{Error, RowBatch, TextColumn};

use layout::check_unique;
pub use layout::Layout;
pub use mapping::{ColumnMapping, ResolvedColumns, Role, ALIASES};
use source::{Failure, Origin, RowReader, Rows};
pub use source::{SourceOptions, StoreOptions, TableVersion};
use stream::{
    check_same_type, conform, plain_row_filter, read_dictionary_text_as_dictionary, unify,
};
pub use stream::{Batches, ColumnBatch, ColumnBatches, TextColumns, Unit, UnitBatches};
pub use table::{Table, TableBatches};

/// How to read a dataset.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Which columns play which role (`None` = default name or alias).
    pub mapping: ColumnMapping,
    /// Input columns to copy into the output unchanged.
    pub keep: Vec<String>,
    /// What asked for each `keep` column, as messages name it, where it was
    /// not `--keep` (a label column of `--gold meaning_match=human`); `None`
    /// or no entry: `--keep`.
    pub keep_asked_by: Vec<Option<String>>,
    /// Rows per record batch.
    pub batch_size: usize,
    /// A column saying per row which optional metrics to run (`--judge-where`):
    /// boolean, string, or list of strings.
    pub row_filter: Option<String>,
    /// Columns judge prompts read (`row.NAME`), each with what reads it (for
    /// the message when the input lacks it); read whether or not `--keep`
    /// names them.
    pub prompt_columns: Vec<(String, String)>,
    /// How to reach object stores and which table version to read.
    pub source: SourceOptions,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            mapping: ColumnMapping::default(),
            keep: Vec::new(),
            keep_asked_by: Vec::new(),
            batch_size: 32 * 1024,
            row_filter: None,
            prompt_columns: Vec::new(),
            source: SourceOptions::default(),
        }
    }
}

/// Most text bytes one batch should hold; see [`Dataset::batch_rows`].
pub const BATCH_BYTES: u64 = 256 << 20;

/// One input file with what its footer told us.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// Where it is, as messages name it: a local path, or an object's URL
    /// without credentials.
    pub path: PathBuf,
    /// Rows, from the footer.
    pub rows: u64,
    /// Its Arrow schema.
    pub schema: SchemaRef,
    /// Rows per row group.
    pub row_groups: Vec<u64>,
    /// Size of the file in bytes when it was opened.
    pub size: u64,
    /// Modification time (ns since the epoch) of a local file, or an
    /// object's version id or ETag, when the system tells it: with the size
    /// and footer hash it tells a changed file from the same.
    pub modified: Option<String>,
    /// SHA-256 of the footer bytes: with the size, it identifies the file's
    /// content for a resumed run (the footer records every page's offset,
    /// size and statistics).
    pub footer_sha256: String,
    meta: ArrowReaderMetadata,
    origin: Origin,
    /// A Delta table file's partition columns (after its own in `schema`).
    partition: Vec<(arrow::datatypes::FieldRef, ArrayRef)>,
    /// A Delta table file: its table's columns and deletion vector. Its
    /// `rows` and `row_groups` then count the rows the vector leaves.
    table_file: Option<source::TableFile>,
}

impl InputFile {
    /// Sets the row counts from the footer, checking that its row groups
    /// add up to the rows it claims.
    pub(crate) fn with_counts(mut self) -> Result<InputFile, Error> {
        let metadata = self.meta.metadata();
        let rows = metadata.file_metadata().num_rows().max(0) as u64;
        let row_groups: Vec<u64> = metadata
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows().max(0) as u64)
            .collect();
        if row_groups.iter().sum::<u64>() != rows {
            return Err(Error::bad_input(format!(
                "{}: corrupt Parquet footer: its row groups hold {} rows, the file says {rows}",
                self.path.display(),
                row_groups.iter().sum::<u64>()
            )));
        }
        self.rows = rows;
        self.row_groups = row_groups;
        if let Some(table) = &self.table_file {
            let mut start = 0;
            for rows in self.row_groups.iter_mut() {
                let physical = *rows;
                *rows = table.live(start, physical);
                start += physical;
            }
            self.rows = self.row_groups.iter().sum();
        }
        Ok(self)
    }

    /// Whether the file is on this machine (not in an object store).
    pub fn is_local(&self) -> bool {
        matches!(self.origin, Origin::Local)
    }

    /// The value of `key` in the file's footer metadata, where refscore
    /// records facts about a result (e.g. the thresholds of its pass rates).
    pub fn footer_value(&self, key: &str) -> Option<&str> {
        self.meta
            .metadata()
            .file_metadata()
            .key_value_metadata()?
            .iter()
            .find(|kv| kv.key == key)?
            .value
            .as_deref()
    }

    /// Row ordinal (within the file) of a row group's first row.
    pub fn row_group_start(&self, row_group: usize) -> u64 {
        self.row_groups[..row_group].iter().sum()
    }
}

/// An opened, validated input dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    files: Vec<InputFile>,
    table: Option<TableVersion>,
    layout: Layout,
    batch_size: usize,
}

impl Dataset {
    /// Finds the files named by `spec` (see [`source`]), reads their
    /// footers, and checks that every mapped column exists with a usable
    /// type in every file.
    pub fn open(spec: &str, options: &ReadOptions) -> Result<Dataset, Error> {
        let listing = source::list(spec, &options.source)?;
        if listing.files.is_empty() {
            return Err(Error::bad_input(format!(
                "{spec}: the table's version {} holds no files (no rows to score)",
                listing.table.as_ref().map_or(0, |t| t.id)
            )));
        }
        let mut files_meta = Vec::with_capacity(listing.files.len());
        for found in listing.files {
            files_meta.push(source::open(found)?);
        }
        let first = &files_meta[0];
        let mut layout = Layout::new(&first.schema, options, &first.path)?;
        for file in &files_meta[1..] {
            mapping::check_optional_roles(&layout.columns, &options.mapping, &first.path, file)?;
            check_unique(&layout.columns, options, &file.schema, &file.path)?;
        }
        let columns = layout.columns.clone();
        let text_roles: Vec<String> = [&columns.input]
            .into_iter()
            .flatten()
            .chain([&columns.reference, &columns.output])
            .cloned()
            .collect();
        for file in files_meta.iter_mut() {
            read_dictionary_text_as_dictionary(file, &text_roles, &options.keep)?;
        }
        let first = &files_meta[0];
        for file in &files_meta[1..] {
            mapping::check_same(&columns, &first.schema, file)?;
            if let Some(name) = &options.row_filter {
                check_same_type(file, first.schema.field_with_name(name).expect("checked"))?;
            }
            for f in layout.keep_fields.iter_mut() {
                *f = unify(file, f)?;
            }
            if columns.id.is_some() {
                layout.id_field = unify(file, &layout.id_field)?;
            }
        }
        Ok(Dataset {
            files: files_meta,
            table: listing.table,
            layout,
            batch_size: options.batch_size.max(1),
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

    /// The table version read, where the input is a table: resumed runs
    /// and the summary record it.
    pub fn table_version(&self) -> Option<u64> {
        self.table.as_ref().map(|t| t.id)
    }

    /// The table version read, with how `inspect` shows it.
    pub fn table(&self) -> Option<&TableVersion> {
        self.table.as_ref()
    }

    /// Which input column plays which role.
    pub fn columns(&self) -> &ResolvedColumns {
        &self.layout.columns
    }

    /// The `id` column's field as it will appear in the output: the input's
    /// id type renamed to `id`, or UInt64 row ordinals.
    pub fn id_field(&self) -> Field {
        self.layout.id_field()
    }

    /// The fields of the columns passed through (`--keep`).
    pub fn keep_fields(&self) -> &[Field] {
        &self.layout.keep_fields
    }

    /// How the files' columns become [`RowBatch`]es.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Streams the rows of every file, in order, as [`RowBatch`]es.
    pub fn batches(&self) -> Batches<'_> {
        Batches {
            dataset: self,
            units: self.units().into_iter(),
            current: None,
        }
    }

    /// Every unit of work in read order: consecutive row groups of one file,
    /// as many as it takes to reach a batch's rows (one row group when row
    /// groups are large), so an input written in tiny row groups still reads
    /// in full batches. Units depend only on the footers and the batch size,
    /// so every run, shard and resumed session cuts the input the same way.
    pub fn units(&self) -> Vec<Unit> {
        let mut out = Vec::new();
        let mut row = 0u64;
        for (f, file) in self.files.iter().enumerate() {
            let mut g = 0;
            while g < file.row_groups.len() {
                let (start, first_row) = (g, row);
                let mut rows = 0u64;
                while g < file.row_groups.len() && rows < self.batch_size as u64 {
                    rows += file.row_groups[g];
                    g += 1;
                }
                row += rows;
                if rows > 0 {
                    out.push(Unit {
                        file: f,
                        row_group: start,
                        row_groups: g - start,
                        first_row,
                        rows,
                    });
                }
            }
        }
        out
    }

    /// Streams rows `from..to` of `unit` (counted within the unit). Batches
    /// are cut every [`Dataset::batch_rows`] rows from the unit's start, so a
    /// range that starts on such a cut yields the same batches as reading the
    /// whole unit.
    pub fn read_unit(&self, unit: &Unit, from: u64, to: u64) -> Result<UnitBatches<'_>, Error> {
        let to = to.min(unit.rows);
        let from = from.min(to);
        let reader = self.open_range(unit, from, to, &self.needed_columns())?;
        Ok(UnitBatches {
            dataset: self,
            unit: *unit,
            from,
            reader: Some(reader),
            failed: false,
        })
    }

    /// Rows per batch in `unit`: the configured batch size, made smaller where
    /// the unit's text is large, so one batch holds at most about
    /// [`BATCH_BYTES`] of text (Arrow's string arrays hold at most 2 GiB).
    pub fn batch_rows(&self, unit: &Unit) -> usize {
        let file = &self.files[unit.file];
        let metadata = file.meta.metadata();
        let names = self.needed_columns();
        // A Delta file with mapped columns names them by their physical
        // names (or field ids), not the logical ones the run asks for.
        let stored: Vec<String> = match &file.table_file {
            Some(table) => table.stored_names(&file.meta, &names),
            None => names.iter().map(|n| n.to_string()).collect(),
        };
        let bytes: i64 = (unit.row_group..unit.row_group + unit.row_groups)
            .flat_map(|g| metadata.row_group(g).columns().iter())
            .filter(|c| {
                let path = c.column_path().parts();
                path.first().is_some_and(|p| stored.contains(p))
            })
            .map(|c| c.uncompressed_size().max(0))
            .sum();
        let per_row = (bytes as u64 / unit.rows.max(1)).max(1);
        ((BATCH_BYTES / per_row) as usize).clamp(1, self.batch_size)
    }

    /// Streams one text column alone (e.g. the references, for IDF weights),
    /// reading nothing else.
    pub fn text_column(&self, role: Role) -> Result<Option<TextColumns<'_>>, Error> {
        let Some(name) = self.layout.columns.name(role) else {
            return Ok(None);
        };
        Ok(Some(TextColumns {
            inner: self.column(name),
        }))
    }

    /// Streams one column alone over every file.
    pub fn column(&self, name: &str) -> ColumnBatches<'_> {
        ColumnBatches {
            dataset: self,
            name: name.to_string(),
            file: 0,
            row_in_file: 0,
            reader: None,
            row_filter: false,
        }
    }

    /// Streams the row-filter column (`--judge-where`) alone, its values as
    /// [`RowBatch::row_filter`] holds them, so every value can be checked
    /// before the first paid call; `None` without a row filter.
    pub fn row_filter_column(&self) -> Option<ColumnBatches<'_>> {
        let name = self.layout.row_filter.as_deref()?;
        Some(ColumnBatches {
            row_filter: true,
            ..self.column(name)
        })
    }

    fn open_reader(&self, file: &InputFile, names: &[&str]) -> Result<RowReader, Error> {
        source::open_rows(file, names, Rows::default(), self.batch_size)
    }

    fn open_range(
        &self,
        unit: &Unit,
        from: u64,
        to: u64,
        names: &[&str],
    ) -> Result<RowReader, Error> {
        let file = &self.files[unit.file];
        let mut selectors = Vec::new();
        if from > 0 {
            selectors.push(RowSelector::skip(from as usize));
        }
        selectors.push(RowSelector::select((to - from) as usize));
        if to < unit.rows {
            selectors.push(RowSelector::skip((unit.rows - to) as usize));
        }
        let rows = Rows {
            row_groups: Some((unit.row_group..unit.row_group + unit.row_groups).collect()),
            selection: Some(RowSelection::from(selectors)),
        };
        source::open_rows(file, names, rows, self.batch_rows(unit))
    }

    /// The row (within the unit) of the first value of `name` that is not
    /// valid UTF-8. The Arrow decoder checks a whole page at once and names
    /// only a byte offset, so the raw values are read here, unchecked.
    fn find_bad_utf8(&self, unit: &Unit, name: &str) -> Option<u64> {
        use parquet::column::reader::ColumnReader;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let file = &self.files[unit.file];
        if !file.is_local() {
            return None;
        }
        let reader = SerializedFileReader::new(File::open(&file.path).ok()?).ok()?;
        let row_group = reader.get_row_group(unit.row_group).ok()?;
        let descr = row_group.metadata().schema_descr_ptr();
        let leaf = (0..descr.num_columns())
            .find(|&i| descr.column(i).path().parts() == [name.to_string()])?;
        let max_def = descr.column(leaf).max_def_level();
        let ColumnReader::ByteArrayColumnReader(mut column) =
            row_group.get_column_reader(leaf).ok()?
        else {
            return None;
        };
        let mut row = 0u64;
        loop {
            let (mut defs, mut values) = (Vec::new(), Vec::new());
            let (records, _, _) = column
                .read_records(4096, Some(&mut defs), None, &mut values)
                .ok()?;
            if records == 0 {
                return None;
            }
            let mut next_value = values.iter();
            for r in 0..records {
                let present = max_def == 0 || defs.get(r).is_some_and(|d| *d == max_def);
                if present {
                    let v = next_value.next()?;
                    if std::str::from_utf8(v.data()).is_err() {
                        return Some(row + r as u64);
                    }
                }
            }
            row += records as u64;
        }
    }

    /// Turns a decode failure in `unit` into a one-line error naming the
    /// file, the column and the row group: each projected column is read
    /// alone until the one that fails is found.
    fn explain_decode_error(&self, unit: &Unit, message: &str) -> Error {
        let file = &self.files[unit.file];
        let shown = file.path.display();
        let what = if message.contains("CRC checksum mismatch") {
            "page checksum mismatch (the file was damaged after it was written)".to_string()
        } else {
            message.to_string()
        };
        for g in unit.row_group..unit.row_group + unit.row_groups {
            let one = Unit {
                file: unit.file,
                row_group: g,
                row_groups: 1,
                first_row: 0,
                rows: file.row_groups[g],
            };
            if one.rows == 0 {
                continue;
            }
            for name in self.needed_columns() {
                let failed = match self.open_range(&one, 0, one.rows, &[name]) {
                    Err(_) => true,
                    Ok(mut reader) => loop {
                        match reader.next_batch() {
                            None => break false,
                            Some(Ok(_)) => continue,
                            Some(Err(Failure::Store(e))) => return e,
                            Some(Err(Failure::Decode(_))) => break true,
                        }
                    },
                };
                if !failed {
                    continue;
                }
                let utf8 = message.to_ascii_lowercase().contains("utf");
                if let Some(row) = utf8.then(|| self.find_bad_utf8(&one, name)).flatten() {
                    return Error::bad_input(format!(
                        "{shown}: column '{name}', row {}: invalid UTF-8 text",
                        file.row_group_start(g) + row
                    ));
                }
                return Error::bad_input(format!(
                    "{shown}: column '{name}', row group {g}: {what}"
                ));
            }
        }
        Error::bad_input(format!(
            "{shown}: row groups {}..{} (rows {} on): {what}",
            unit.row_group,
            unit.row_group + unit.row_groups,
            file.row_group_start(unit.row_group)
        ))
    }

    fn needed_columns(&self) -> Vec<&str> {
        self.layout.needed_columns()
    }
}
