//! The `inspect` command: what refscore would read, before scoring.

use refscore_batch::{is_string_type, Error};
use refscore_read::{ColumnMapping, Dataset, ReadOptions, Role};

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
        ..ReadOptions::default()
    };
    let dataset = Dataset::open(&args.input, &options)?;
    let files = dataset.files();
    println!("files: {}", files.len());
    for f in files.iter().take(20) {
        println!("  {}  ({} rows)", f.path.display(), f.rows);
    }
    if files.len() > 20 {
        println!("  ... and {} more", files.len() - 20);
    }
    println!("rows: {}", dataset.total_rows());
    println!("schema (of {}):", files[0].path.display());
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
        println!(
            "  {:<24} {:<28} {null}{text}",
            field.name(),
            field.data_type().to_string()
        );
    }
    println!("mapping:");
    let cols = dataset.columns();
    for (role, how) in cols.how {
        let col = match cols.name(role) {
            Some(c) => format!("'{c}'"),
            None if role == Role::Id => "(none: the row ordinal is the id)".to_string(),
            None => "(none)".to_string(),
        };
        println!("  {:<10} <- {col}  [{how}]", role.name());
    }
    Ok(())
}
