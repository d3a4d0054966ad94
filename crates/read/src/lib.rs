//! Reading the input dataset (docs/metrics.md#input).
//!
//! [`Dataset::open`] finds the files (a file, a directory or a glob), reads
//! every footer, resolves the column mapping and checks the column types
//! before any work starts; [`Dataset::batches`] then streams [`RowBatch`]es,
//! projecting only the columns it needs, so memory does not grow with the
//! number of rows.

mod files;
mod mapping;
mod quiet_panic;
mod table;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::arrow::ProjectionMask;
use refscore_batch::{Error, RowBatch, TextColumn};

pub use mapping::{ColumnMapping, ResolvedColumns, Role, ALIASES};
pub use table::{Table, TableBatches};

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

/// Most text bytes one batch should hold; see [`Dataset::batch_rows`].
pub const BATCH_BYTES: u64 = 256 << 20;

/// One input file with what its footer told us.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// Where it is.
    pub path: PathBuf,
    /// Rows, from the footer.
    pub rows: u64,
    /// Its Arrow schema.
    pub schema: SchemaRef,
    /// Rows per row group.
    pub row_groups: Vec<u64>,
    /// Size of the file in bytes when it was opened.
    pub size: u64,
    /// Modification time (ns since the epoch), when the system tells it:
    /// with the size and footer hash it tells a changed file from the same.
    pub modified: Option<String>,
    /// SHA-256 of the footer bytes: with the size, it identifies the file's
    /// content for a resumed run (the footer records every page's offset,
    /// size and statistics).
    pub footer_sha256: String,
    meta: ArrowReaderMetadata,
}

impl InputFile {
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
    layout: Layout,
    batch_size: usize,
}

/// Which input column plays which role and how each becomes part of a
/// [`RowBatch`], checked against one Arrow schema. A [`Dataset`] holds one for
/// its files; [`Layout::new`] also maps record batches that come from
/// elsewhere (an Arrow stream handed over from Python), with the same checks,
/// the same messages and the same conversions.
#[derive(Debug, Clone)]
pub struct Layout {
    columns: ResolvedColumns,
    keep: Vec<String>,
    keep_fields: Vec<Field>,
    id_field: Field,
    row_filter: Option<String>,
}

impl Layout {
    /// Resolves the mapping of `options` against `schema` and checks every
    /// column it names (types, duplicates, `--keep`, `--judge-where`).
    /// `source` names the data in messages (a file path).
    pub fn new(schema: &Schema, options: &ReadOptions, source: &Path) -> Result<Layout, Error> {
        let shown = source.display();
        let columns = mapping::resolve(&options.mapping, schema, source)?;
        for (k, name) in options.keep.iter().enumerate() {
            if options.keep[..k].contains(name) {
                return Err(Error::config(format!("--keep names column '{name}' twice")));
            }
        }
        check_unique(&columns, options, schema, source)?;
        let mut keep_fields = Vec::new();
        for name in &options.keep {
            let field = schema.field_with_name(name).map_err(|_| {
                Error::bad_input(format!(
                    "{shown}: --keep column '{name}' not found (columns: {})",
                    mapping::column_list(schema)
                ))
            })?;
            keep_fields.push(field.clone().with_nullable(true));
        }
        let id_field = match &columns.id {
            Some(name) => schema
                .field_with_name(name)
                .expect("resolved")
                .clone()
                .with_nullable(true),
            None => Field::new("id", DataType::UInt64, false),
        };
        if let Some(name) = &options.row_filter {
            let field = schema.field_with_name(name).map_err(|_| {
                Error::bad_input(format!(
                    "{shown}: --judge-where column '{name}' not found (columns: {})",
                    mapping::column_list(schema)
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
                    "{shown}: --judge-where column '{name}' has type {}; expected boolean, string or list of strings",
                    field.data_type()
                )));
            }
        }
        Ok(Layout {
            columns,
            keep: options.keep.clone(),
            keep_fields,
            id_field,
            row_filter: options.row_filter.clone(),
        })
    }

    /// Which input column plays which role.
    pub fn columns(&self) -> &ResolvedColumns {
        &self.columns
    }

    /// Gives the passed-through columns (id, `--keep`) of a string kind
    /// (`LargeUtf8`, `Utf8View`) the type refscore reads such a column with
    /// from a Parquet file, `Utf8`, so in-memory data (Polars hands over
    /// views) gets the output types a file of the same rows gets.
    pub fn plain_strings(mut self) -> Layout {
        let plain = |f: &mut Field| {
            if matches!(f.data_type(), DataType::LargeUtf8 | DataType::Utf8View) {
                *f = f.clone().with_data_type(DataType::Utf8);
            }
        };
        plain(&mut self.id_field);
        self.keep_fields.iter_mut().for_each(plain);
        self
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

    /// The columns a batch must hold: the mapped ones, `--keep` and the row
    /// filter, each once.
    pub fn needed_columns(&self) -> Vec<&str> {
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

    /// Turns a record batch holding (at least) the needed columns into a
    /// [`RowBatch`]: `first_row` is the ordinal of its first row in the whole
    /// input (the id when there is no id column), `row_in_source` its row
    /// within `source` (for messages).
    pub fn row_batch(
        &self,
        batch: &RecordBatch,
        source: &Path,
        first_row: u64,
        row_in_source: u64,
    ) -> Result<RowBatch, Error> {
        let shown = source.display();
        let col = |name: &str| -> Result<&ArrayRef, Error> {
            batch.column_by_name(name).ok_or_else(|| {
                Error::bad_input(format!(
                    "{shown}: column '{name}' not found; columns are: {}",
                    mapping::column_list(&batch.schema())
                ))
            })
        };
        let text = |name: &str| -> Result<TextColumn, Error> {
            let array = col(name)?;
            TextColumn::from_array(array).ok_or_else(|| {
                Error::bad_input(format!(
                    "{shown}: column '{name}' has type {}, expected a string type",
                    array.data_type()
                ))
            })
        };
        let id: ArrayRef = match &self.columns.id {
            Some(name) => conform(col(name)?, &self.id_field, source)?,
            None => Arc::new(UInt64Array::from_iter_values(
                first_row..first_row + batch.num_rows() as u64,
            )),
        };
        Ok(RowBatch {
            first_row,
            source: Arc::from(shown.to_string()),
            first_row_in_source: row_in_source,
            id,
            input: self.columns.input.as_deref().map(text).transpose()?,
            reference: text(&self.columns.reference)?,
            output: text(&self.columns.output)?,
            passthrough: self
                .keep
                .iter()
                .zip(&self.keep_fields)
                .map(|(k, f)| conform(col(k)?, f, source))
                .collect::<Result<_, _>>()?,
            row_filter: self
                .row_filter
                .as_deref()
                .map(|k| col(k).map(plain_row_filter))
                .transpose()?,
        })
    }
}

/// Fails when a column the run reads appears more than once in `schema`.
fn check_unique(
    columns: &ResolvedColumns,
    options: &ReadOptions,
    schema: &Schema,
    source: &Path,
) -> Result<(), Error> {
    let wanted = [&columns.id, &columns.input]
        .into_iter()
        .flatten()
        .chain([&columns.reference, &columns.output])
        .chain(options.keep.iter())
        .chain(options.row_filter.iter());
    for name in wanted {
        let n = schema.fields().iter().filter(|f| f.name() == name).count();
        if n > 1 {
            return Err(Error::config(format!(
                "{}: column '{name}' appears {n} times; refscore cannot tell which one is meant (rename the duplicates)",
                source.display()
            )));
        }
    }
    Ok(())
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
        let mut layout = Layout::new(&first.schema, options, &first.path)?;
        for file in &files_meta[1..] {
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
        let bytes: i64 = (unit.row_group..unit.row_group + unit.row_groups)
            .flat_map(|g| metadata.row_group(g).columns().iter())
            .filter(|c| {
                let path = c.column_path().parts();
                path.first().is_some_and(|p| names.contains(&p.as_str()))
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

    fn open_reader(
        &self,
        file: &InputFile,
        names: &[&str],
    ) -> Result<ParquetRecordBatchReader, Error> {
        let builder = self.builder(file, names)?;
        builder
            .with_batch_size(self.batch_size)
            .build()
            .map_err(|e| Error::bad_input(format!("{}: {e}", file.path.display())))
    }

    fn builder(
        &self,
        file: &InputFile,
        names: &[&str],
    ) -> Result<ParquetRecordBatchReaderBuilder<File>, Error> {
        let handle = File::open(&file.path)
            .map_err(|e| Error::io(format!("{}: cannot open: {e}", file.path.display())))?;
        let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(handle, file.meta.clone());
        let parquet_schema = builder.parquet_schema();
        let roots: Vec<usize> = names
            .iter()
            .map(|n| file.schema.index_of(n).expect("validated when opened"))
            .collect();
        let mask = ProjectionMask::roots(parquet_schema, roots);
        Ok(builder.with_projection(mask))
    }

    fn open_range(
        &self,
        unit: &Unit,
        from: u64,
        to: u64,
        names: &[&str],
    ) -> Result<ParquetRecordBatchReader, Error> {
        let file = &self.files[unit.file];
        let mut selectors = Vec::new();
        if from > 0 {
            selectors.push(RowSelector::skip(from as usize));
        }
        selectors.push(RowSelector::select((to - from) as usize));
        if to < unit.rows {
            selectors.push(RowSelector::skip((unit.rows - to) as usize));
        }
        self.builder(file, names)?
            .with_row_groups((unit.row_group..unit.row_group + unit.row_groups).collect())
            .with_row_selection(RowSelection::from(selectors))
            .with_batch_size(self.batch_rows(unit))
            .build()
            .map_err(|e| Error::bad_input(format!("{}: {e}", file.path.display())))
    }

    /// The row (within the unit) of the first value of `name` that is not
    /// valid UTF-8. The Arrow decoder checks a whole page at once and names
    /// only a byte offset, so the raw values are read here, unchecked.
    fn find_bad_utf8(&self, unit: &Unit, name: &str) -> Option<u64> {
        use parquet::column::reader::ColumnReader;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let file = &self.files[unit.file];
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
                        match decode_next(&mut reader) {
                            None => break false,
                            Some(Ok(_)) => continue,
                            Some(Err(_)) => break true,
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

/// Asks the Parquet reader for dictionary arrays for the text columns whose
/// every data page, in every row group, is dictionary-encoded: such a column
/// then reaches the metrics as one copy of each distinct value plus indices,
/// never expanded per row (one 70 KB answer repeated in 32k rows stays 70 KB,
/// where expanding it would need 2.3 GB and overflow a string array). Free,
/// since those pages hold exactly that. Columns also passed through with
/// --keep are left alone (they are copied as they are).
fn read_dictionary_text_as_dictionary(
    file: &mut InputFile,
    columns: &[String],
    keep: &[String],
) -> Result<(), Error> {
    use parquet::basic::Encoding;
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
    let fields: Vec<Field> = file
        .schema
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
        let schema = Arc::new(Schema::new_with_metadata(
            fields,
            file.schema.metadata().clone(),
        ));
        file.meta =
            ArrowReaderMetadata::try_new(metadata, ArrowReaderOptions::new().with_schema(schema))
                .map_err(|e| Error::bad_input(format!("{}: {e}", file.path.display())))?;
    }
    Ok(())
}

/// The row-filter column as stages read it: dictionary-encoded values
/// decoded (their value type is boolean, string or list, checked on open).
fn plain_row_filter(array: &ArrayRef) -> ArrayRef {
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
fn unify(file: &InputFile, so_far: &Field) -> Result<Field, Error> {
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
    let text = |t: &DataType| refscore_batch::is_string_type(t);
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
fn conform(array: &ArrayRef, field: &Field, source: &Path) -> Result<ArrayRef, Error> {
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
    dataset: &'a Dataset,
    unit: Unit,
    from: u64,
    reader: Option<ParquetRecordBatchReader>,
    failed: bool,
}

impl Iterator for UnitBatches<'_> {
    type Item = Result<RowBatch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let file = &self.dataset.files[self.unit.file];
        let next = decode_next(self.reader.as_mut()?);
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
            Some(Err(e)) => {
                self.failed = true;
                Some(Err(self.dataset.explain_decode_error(&self.unit, &e)))
            }
        }
    }
}

/// Iterator over the dataset's [`RowBatch`]es, unit after unit; see
/// [`Dataset::batches`].
pub struct Batches<'a> {
    dataset: &'a Dataset,
    units: std::vec::IntoIter<Unit>,
    current: Option<UnitBatches<'a>>,
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
    dataset: &'a Dataset,
    name: String,
    file: usize,
    row_in_file: u64,
    reader: Option<ParquetRecordBatchReader>,
    row_filter: bool,
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
            match decode_next(self.reader.as_mut().expect("set")) {
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
                Some(Err(e)) => {
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
    inner: ColumnBatches<'a>,
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
