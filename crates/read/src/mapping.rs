//! Which input column plays which role: the user's names, else the default
//! name, else one unambiguous alias.

use std::path::Path;

use arrow::datatypes::Schema;
use refscore_core::{is_text_type, Error};

use crate::InputFile;

/// The four roles a column can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Row identifier (optional; the row ordinal otherwise).
    Id,
    /// The question or prompt (optional).
    Input,
    /// The ground-truth answer.
    Reference,
    /// The model's answer.
    Output,
}

impl Role {
    /// The role's default column name, also its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::Id => "id",
            Role::Input => "input",
            Role::Reference => "reference",
            Role::Output => "output",
        }
    }

    /// The CLI flag that names this role's column.
    pub fn flag(self) -> &'static str {
        match self {
            Role::Id => "--id-col",
            Role::Input => "--input-col",
            Role::Reference => "--reference-col",
            Role::Output => "--output-col",
        }
    }

    const ALL: [Role; 4] = [Role::Id, Role::Input, Role::Reference, Role::Output];
}

/// Recognised column names per role: the default first, then the aliases.
pub const ALIASES: [(Role, &[&str]); 4] = [
    (Role::Id, &["id", "row_id", "example_id", "uuid"]),
    (Role::Input, &["input", "question", "prompt", "query"]),
    (
        Role::Reference,
        &[
            "reference",
            "ground_truth",
            "expected_output",
            "expected_answer",
            "gold_answer",
            "target",
        ],
    ),
    (
        Role::Output,
        &[
            "output",
            "actual_output",
            "response",
            "prediction",
            "model_output",
            "completion",
        ],
    ),
];

/// The column names the user gave (`None` = find it by name or alias).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnMapping {
    /// `--id-col`.
    pub id: Option<String>,
    /// `--input-col`.
    pub input: Option<String>,
    /// `--reference-col`.
    pub reference: Option<String>,
    /// `--output-col`.
    pub output: Option<String>,
}

impl ColumnMapping {
    fn get(&self, role: Role) -> Option<&str> {
        match role {
            Role::Id => self.id.as_deref(),
            Role::Input => self.input.as_deref(),
            Role::Reference => self.reference.as_deref(),
            Role::Output => self.output.as_deref(),
        }
    }
}

/// The input column chosen for each role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedColumns {
    /// The id column, if the input has one.
    pub id: Option<String>,
    /// The question column, if the input has one.
    pub input: Option<String>,
    /// The reference column.
    pub reference: String,
    /// The output column.
    pub output: String,
    /// For each role, how the column was found ("--reference-col", "default
    /// name", "alias", "absent"), for `inspect`.
    pub how: [(Role, &'static str); 4],
}

impl ResolvedColumns {
    /// The column chosen for `role`, if any.
    pub fn name(&self, role: Role) -> Option<&str> {
        match role {
            Role::Id => self.id.as_deref(),
            Role::Input => self.input.as_deref(),
            Role::Reference => Some(&self.reference),
            Role::Output => Some(&self.output),
        }
    }
}

pub(crate) fn column_list(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn resolve(
    mapping: &ColumnMapping,
    schema: &Schema,
    path: &Path,
) -> Result<ResolvedColumns, Error> {
    let shown = path.display();
    let mut chosen: Vec<(Role, Option<String>, &'static str)> = Vec::new();
    for role in Role::ALL {
        let aliases = ALIASES
            .iter()
            .find(|(r, _)| *r == role)
            .expect("every role")
            .1;
        let (name, how) = if let Some(given) = mapping.get(role) {
            if schema.field_with_name(given).is_err() {
                return Err(Error::bad_input(format!(
                    "{shown}: column '{given}' (given by {}) not found; columns are: {}",
                    role.flag(),
                    column_list(schema)
                )));
            }
            (Some(given.to_string()), role.flag())
        } else if schema.field_with_name(role.name()).is_ok() {
            (Some(role.name().to_string()), "default name")
        } else {
            let found: Vec<&str> = aliases[1..]
                .iter()
                .copied()
                .filter(|a| schema.field_with_name(a).is_ok())
                .filter(|a| mapping_names(mapping).all(|g| g != *a))
                .collect();
            match found.as_slice() {
                [] => (None, "absent"),
                [one] => (Some(one.to_string()), "alias"),
                many => {
                    return Err(Error::config(format!(
                        "{shown}: the {} column is ambiguous: columns {} could all be it; choose one with {}",
                        role.name(),
                        many.iter().map(|m| format!("'{m}'")).collect::<Vec<_>>().join(" and "),
                        role.flag()
                    )))
                }
            }
        };
        if let Some(n) = &name {
            if let Some((other, _, _)) = chosen.iter().find(|(_, c, _)| c.as_deref() == Some(n)) {
                return Err(Error::config(format!(
                    "{shown}: column '{n}' cannot be both the {} and the {} column; set {} or {}",
                    other.name(),
                    role.name(),
                    other.flag(),
                    role.flag()
                )));
            }
        }
        if name.is_none() && matches!(role, Role::Reference | Role::Output) {
            return Err(Error::bad_input(format!(
                "{shown}: no {} column: looked for {}; columns are: {}; name it with {}",
                role.name(),
                aliases
                    .iter()
                    .map(|a| format!("'{a}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                column_list(schema),
                role.flag()
            )));
        }
        if let Some(n) = &name {
            if role != Role::Id {
                let field = schema.field_with_name(n).expect("checked");
                if !is_text_type(field.data_type()) {
                    return Err(Error::bad_input(format!(
                        "{shown}: column '{n}' ({} column) has type {}; expected a string (Utf8, LargeUtf8, Utf8View or dictionary of those)",
                        role.name(),
                        field.data_type()
                    )));
                }
            }
        }
        chosen.push((role, name, how));
    }
    let mut it = chosen.into_iter();
    let mut next = || it.next().expect("four roles");
    let (id, input, reference, output) = (next(), next(), next(), next());
    Ok(ResolvedColumns {
        how: [
            (Role::Id, id.2),
            (Role::Input, input.2),
            (Role::Reference, reference.2),
            (Role::Output, output.2),
        ],
        id: id.1,
        input: input.1,
        reference: reference.1.expect("checked"),
        output: output.1.expect("checked"),
    })
}

/// The column `role` would find in `schema` by its default name or one
/// alias (not a name the user gave), without any check: a later file's
/// optional role that the first file lacks is found with it.
pub(crate) fn found_by_name(
    mapping: &ColumnMapping,
    schema: &Schema,
    role: Role,
) -> Option<String> {
    if let Some(given) = mapping.get(role) {
        return schema
            .field_with_name(given)
            .ok()
            .map(|_| given.to_string());
    }
    let aliases = ALIASES.iter().find(|(r, _)| *r == role)?.1;
    aliases
        .iter()
        .find(|a| schema.field_with_name(a).is_ok() && mapping_names(mapping).all(|g| g != **a))
        .map(|a| a.to_string())
}

/// Refuses a later file that has a column for an optional role (id,
/// input) that the first file lacks: the role is resolved on the first
/// file, so every row's id would silently become its row number (and
/// `report --baseline` would pair unrelated rows), or the questions would
/// be dropped.
pub(crate) fn check_optional_roles(
    columns: &ResolvedColumns,
    mapping: &ColumnMapping,
    first: &Path,
    file: &InputFile,
) -> Result<(), Error> {
    for role in [Role::Id, Role::Input] {
        if columns.name(role).is_some() {
            continue;
        }
        if let Some(name) = found_by_name(mapping, &file.schema, role) {
            return Err(Error::bad_input(format!(
                "{}: has no {} column, but {} has one ('{name}'); files must agree on their \
                 columns (give every file the column, or score the files apart)",
                first.display(),
                role.name(),
                file.path.display()
            )));
        }
    }
    Ok(())
}

fn mapping_names(mapping: &ColumnMapping) -> impl Iterator<Item = &str> {
    [
        &mapping.id,
        &mapping.input,
        &mapping.reference,
        &mapping.output,
    ]
    .into_iter()
    .flatten()
    .map(|s| s.as_str())
}

/// Checks that a later file has the first file's mapped columns with
/// compatible types.
pub(crate) fn check_same(
    columns: &ResolvedColumns,
    first: &Schema,
    file: &InputFile,
) -> Result<(), Error> {
    let shown = file.path.display();
    for role in Role::ALL {
        let Some(name) = columns.name(role) else {
            continue;
        };
        let Ok(field) = file.schema.field_with_name(name) else {
            return Err(Error::bad_input(format!(
                "{shown}: column '{name}' ({} column) not found; columns are: {}",
                role.name(),
                column_list(&file.schema)
            )));
        };
        if role == Role::Id {
            // Checked (and string kinds unified) by the caller.
            let _ = first;
        } else if !is_text_type(field.data_type()) {
            return Err(Error::bad_input(format!(
                "{shown}: column '{name}' ({} column) has type {}; expected a string",
                role.name(),
                field.data_type()
            )));
        }
    }
    Ok(())
}
