//! An Iceberg schema as the columns refscore reads: by their names and the
//! table's types, each matched in a file by its field id (so renamed
//! columns read by their new names and added ones read as nulls).

use delta_kernel::schema::{
    ArrayType, ColumnMetadataKey, DataType as KernelType, MapType, MetadataValue, StructField,
    StructType,
};
use refscore_core::Error;

use super::metadata::{Field, FieldType, Nested, Schema};
use crate::source::TableColumns;

/// The snapshot's columns: logical (by name) and physical (by field id).
pub(super) fn table_columns(shown: &str, schema: &Schema) -> Result<TableColumns, Error> {
    let mut logical = Vec::new();
    let mut physical = Vec::new();
    for field in &schema.fields {
        logical.push(kernel_field(shown, field, false)?);
        physical.push(kernel_field(shown, field, true)?);
    }
    TableColumns::new(shown, logical, physical)
}

/// One Iceberg field as a kernel field; `with_ids`: carrying its field id
/// (and its children's) as the Parquet field id a file is matched by.
fn kernel_field(shown: &str, field: &Field, with_ids: bool) -> Result<StructField, Error> {
    let data_type = kernel_type(shown, &field.name, &field.kind, with_ids)?;
    let out = StructField::new(field.name.clone(), data_type, !field.required);
    Ok(if with_ids {
        out.with_metadata([(
            ColumnMetadataKey::ParquetFieldId.as_ref().to_string(),
            MetadataValue::Number(i64::from(field.id)),
        )])
    } else {
        out
    })
}

fn kernel_type(
    shown: &str,
    name: &str,
    t: &FieldType,
    with_ids: bool,
) -> Result<KernelType, Error> {
    let refuse = |what: &str| {
        Error::config(format!(
            "{shown}: column '{name}' is of Iceberg type {what}, which refscore's Iceberg \
             reader does not read"
        ))
    };
    Ok(match t {
        FieldType::Primitive(p) => match p.as_str() {
            "boolean" => KernelType::BOOLEAN,
            "int" => KernelType::INTEGER,
            "long" => KernelType::LONG,
            "float" => KernelType::FLOAT,
            "double" => KernelType::DOUBLE,
            "date" => KernelType::DATE,
            "timestamp" => KernelType::TIMESTAMP_NTZ,
            "timestamptz" => KernelType::TIMESTAMP,
            "string" => KernelType::STRING,
            "binary" => KernelType::BINARY,
            other => match decimal(other) {
                Some((precision, scale)) => {
                    KernelType::decimal(precision, scale).map_err(|_| refuse(other))?
                }
                None => return Err(refuse(other)),
            },
        },
        FieldType::Nested(Nested::Struct { fields }) => {
            let fields = fields
                .iter()
                .map(|f| kernel_field(shown, f, with_ids))
                .collect::<Result<Vec<_>, _>>()?;
            KernelType::Struct(Box::new(
                StructType::try_new(fields).map_err(|e| refuse(&e.to_string()))?,
            ))
        }
        FieldType::Nested(Nested::List {
            element,
            element_required,
        }) => {
            let element = kernel_type(shown, name, element, with_ids)?;
            KernelType::Array(Box::new(ArrayType::new(element, !element_required)))
        }
        FieldType::Nested(Nested::Map {
            key,
            value,
            value_required,
        }) => {
            let key = kernel_type(shown, name, key, with_ids)?;
            let value = kernel_type(shown, name, value, with_ids)?;
            KernelType::Map(Box::new(MapType::new(key, value, !value_required)))
        }
    })
}

/// `decimal(P, S)`'s precision and scale.
fn decimal(name: &str) -> Option<(u8, u8)> {
    let inner = name.strip_prefix("decimal(")?.strip_suffix(')')?;
    let (p, s) = inner.split_once(',')?;
    Some((p.trim().parse().ok()?, s.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_with_or_without_a_space() {
        assert_eq!(decimal("decimal(9, 2)"), Some((9, 2)));
        assert_eq!(decimal("decimal(38,0)"), Some((38, 0)));
        assert_eq!(decimal("fixed[16]"), None);
    }
}
