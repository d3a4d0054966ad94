//! The `inspect` command: what refscore would read, before scoring.

use refscore_core::{is_string_type, Error};
use refscore_read::{ColumnMapping, Dataset, ReadOptions, Role};

use std::fmt::Write;

use crate::args::InspectArgs;

/// Prints the files, their schema, the total row count and the column mapping.
pub fn run(args: InspectArgs) -> Result<(), Error> {
    let mapping = ColumnMapping {
        id: args.mapping.id_col,
        input: args.mapping.input_col,
        reference: args.mapping.reference_col,
        output: args.mapping.output_col,
    };
    let options = ReadOptions {
        mapping,
        source: crate::settings::source_options(&args.source)?,
        ..ReadOptions::default()
    };
    let dataset = Dataset::open(&args.input, &options)?;
    let mut out = String::new();
    let files = dataset.files();
    let _ = writeln!(out, "files: {}", files.len());
    for f in files.iter().take(20) {
        let _ = writeln!(out, "  {}  ({} rows)", f.path.display(), f.rows);
    }
    if files.len() > 20 {
        let _ = writeln!(out, "  ... and {} more", files.len() - 20);
    }
    for line in dataset.table().iter().flat_map(|t| &t.about) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "rows: {}", dataset.total_rows());
    let _ = writeln!(out, "schema (of {}):", files[0].path.display());
    for field in files[0].schema.fields() {
        let text = if is_string_type(field.data_type()) {
            "  text"
        } else {
            ""
        };
        let null = if field.is_nullable() {
            "nullable"
        } else {
            "not null"
        };
        let _ = writeln!(
            out,
            "  {:<24} {:<28} {null}{text}",
            field.name(),
            field.data_type().to_string()
        );
    }
    let _ = writeln!(out, "mapping:");
    let cols = dataset.columns();
    for (role, how) in cols.how {
        let col = match cols.name(role) {
            Some(c) => format!("'{c}'"),
            None if role == Role::Id => "(none: the row ordinal is the id)".to_string(),
            None => "(none)".to_string(),
        };
        let _ = writeln!(out, "  {:<10} <- {col}  [{how}]", role.name());
    }
    crate::print_out(&out)
}
