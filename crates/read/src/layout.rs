//! Which input column plays which role, checked against one schema, and how
//! a record batch of that schema becomes a [`RowBatch`].

use super::*;

/// Which input column plays which role and how each becomes part of a
/// [`RowBatch`], checked against one Arrow schema. A [`Dataset`] holds one for
/// its files; [`Layout::new`] also maps record batches that come from
/// elsewhere (an Arrow stream handed over from Python), with the same checks,
/// the same messages and the same conversions.
#[derive(Debug, Clone)]
pub struct Layout {
    pub(crate) columns: ResolvedColumns,
    pub(crate) keep: Vec<String>,
    pub(crate) keep_fields: Vec<Field>,
    pub(crate) id_field: Field,
    pub(crate) row_filter: Option<String>,
    pub(crate) prompt_columns: Vec<String>,
}

impl Layout {
    /// Resolves the mapping of `options` against `schema` and checks every
    /// column it names (types, duplicates, `--keep`, `--judge-where`).
    /// `source` names the data in messages (a file path).
    pub fn new(schema: &Schema, options: &ReadOptions, source: &Path) -> Result<Layout, Error> {
        let shown = source.display();
        let columns = mapping::resolve(&options.mapping, schema, source)?;
        let asked_by = |k: usize| match options.keep_asked_by.get(k) {
            Some(Some(by)) => by.as_str(),
            _ => "--keep",
        };
        for (k, name) in options.keep.iter().enumerate() {
            if options.keep[..k].contains(name) {
                return Err(Error::config(format!(
                    "{} names column '{name}' twice",
                    asked_by(k)
                )));
            }
        }
        check_unique(&columns, options, schema, source)?;
        let mut keep_fields = Vec::new();
        for (k, name) in options.keep.iter().enumerate() {
            let field = schema.field_with_name(name).map_err(|_| {
                let what = match options.keep_asked_by.get(k) {
                    Some(Some(by)) => format!("{by}: column '{name}'"),
                    _ => format!("--keep column '{name}'"),
                };
                Error::bad_input(format!(
                    "{shown}: {what} not found (columns: {})",
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
                    refscore_core::is_string_type(item.data_type())
                }
                t => refscore_core::is_string_type(t),
            };
            if !ok {
                return Err(Error::bad_input(format!(
                    "{shown}: --judge-where column '{name}' has type {}; expected boolean, string or list of strings",
                    field.data_type()
                )));
            }
        }
        for (name, reader) in &options.prompt_columns {
            let field = schema.field_with_name(name).map_err(|_| {
                Error::config(format!(
                    "{reader} reads column '{name}', which {shown} does not have (columns: {})",
                    mapping::column_list(schema)
                ))
            })?;
            if !arrow::compute::can_cast_types(field.data_type(), &DataType::Utf8) {
                return Err(Error::config(format!(
                    "{reader} reads column '{name}' of {shown}, whose type {} has no text form",
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
            prompt_columns: options
                .prompt_columns
                .iter()
                .map(|(n, _)| n.clone())
                .collect(),
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

    /// The columns a batch must hold: the mapped ones, `--keep`, the row
    /// filter and those judge prompts read, each once.
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
            .chain(&self.prompt_columns)
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
        let mut rows = RowBatch::new(
            first_row,
            Arc::from(shown.to_string()),
            row_in_source,
            id,
            self.columns.input.as_deref().map(text).transpose()?,
            text(&self.columns.reference)?,
            text(&self.columns.output)?,
        );
        rows.passthrough = self
            .keep
            .iter()
            .zip(&self.keep_fields)
            .map(|(k, f)| conform(col(k)?, f, source))
            .collect::<Result<_, _>>()?;
        rows.row_filter = self
            .row_filter
            .as_deref()
            .map(|k| col(k).map(plain_row_filter))
            .transpose()?;
        rows.prompt_columns = self
            .prompt_columns
            .iter()
            .map(|k| col(k).map(|a| (k.clone(), a.clone())))
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }
}

/// Fails when a column the run reads appears more than once in `schema`.
pub(crate) fn check_unique(
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
