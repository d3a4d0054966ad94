//! An Iceberg table's metadata file (the spec's JSON, format versions 1
//! and 2): the parts refscore reads (its snapshots, their log, schemas and
//! partition specs), and which snapshot a run reads.

use bytes::Bytes;
use refscore_core::Error;
use serde::Deserialize;

use crate::source::SourceOptions;

/// The fields of a table metadata file that reading a snapshot needs.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct TableMetadata {
    // Required by the spec in every version: a file without them is not
    // table metadata (read to be checked, not used).
    #[serde(rename = "format-version")]
    _format_version: u8,
    #[serde(rename = "location")]
    _location: String,
    #[serde(rename = "last-updated-ms")]
    _last_updated_ms: i64,
    /// Absent, null or -1 (version 1 writers) when the table has no snapshot.
    #[serde(default)]
    pub current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    /// Which snapshot became current when.
    #[serde(default)]
    pub snapshot_log: Vec<LogEntry>,
    #[serde(default)]
    pub schemas: Vec<Schema>,
    #[serde(default)]
    pub current_schema_id: Option<i32>,
    /// Version 1's single schema (older writers write no `schemas`).
    #[serde(default)]
    pub schema: Option<Schema>,
    #[serde(default)]
    pub partition_specs: Vec<PartitionSpec>,
    /// Version 1's single spec (its fields), id 0.
    #[serde(default)]
    pub partition_spec: Option<Vec<serde_json::Value>>,
}

/// One snapshot: a state of the table, and where its manifests are listed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct Snapshot {
    pub snapshot_id: i64,
    pub timestamp_ms: i64,
    /// The Avro manifest list (version 2; most version 1 writers too).
    #[serde(default)]
    pub manifest_list: Option<String>,
    /// Version 1's alternative: the manifests named inline.
    #[serde(default)]
    pub manifests: Vec<String>,
    #[serde(default)]
    pub schema_id: Option<i32>,
}

/// One line of the snapshot log.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct LogEntry {
    pub timestamp_ms: i64,
    pub snapshot_id: i64,
}

/// A schema: its top-level fields.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct Schema {
    #[serde(default)]
    pub schema_id: i32,
    pub fields: Vec<Field>,
}

/// A named field with its id (by which files are matched) and type.
#[derive(Debug, Deserialize)]
pub(super) struct Field {
    pub id: i32,
    pub name: String,
    pub required: bool,
    #[serde(rename = "type")]
    pub kind: FieldType,
}

/// A field's type: a primitive by name (`long`, `decimal(9, 2)`, …) or a
/// nested type.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum FieldType {
    Primitive(String),
    Nested(Nested),
}

/// The spec's nested types.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(super) enum Nested {
    Struct {
        fields: Vec<Field>,
    },
    List {
        element: Box<FieldType>,
        #[serde(rename = "element-required")]
        element_required: bool,
    },
    Map {
        key: Box<FieldType>,
        value: Box<FieldType>,
        #[serde(rename = "value-required")]
        value_required: bool,
    },
}

/// A partition spec: whether its files share a partition value (a spec
/// with no fields partitions nothing, so its deletes reach every file).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct PartitionSpec {
    pub spec_id: i32,
    pub fields: Vec<serde_json::Value>,
}

impl TableMetadata {
    /// The metadata file `bytes` (gzip-compressed where it starts so),
    /// refused in one line where it is of a format version refscore does
    /// not read or is not table metadata.
    pub fn read(shown: &str, shown_file: &str, bytes: &Bytes) -> Result<TableMetadata, Error> {
        let text = if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut text = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(bytes.as_ref()),
                &mut text,
            )
            .map_err(|e| Error::bad_input(format!("{shown}: {shown_file} is not gzip: {e}")))?;
            Bytes::from(text)
        } else {
            bytes.clone()
        };
        let not_metadata = |e: &dyn std::fmt::Display| {
            Error::bad_input(format!(
                "{shown}: cannot read the Iceberg table: {shown_file} is not table metadata ({e})"
            ))
        };
        // The format version first: a later one may not parse as an earlier one.
        let value: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| not_metadata(&e))?;
        let version = value.get("format-version").and_then(|v| v.as_u64());
        if let Some(version) = version.filter(|v| !(1..=2).contains(v)) {
            return Err(Error::config(format!(
                "{shown}: the Iceberg table is of format version {version}, and refscore reads \
                 format versions 1 and 2"
            )));
        }
        serde_json::from_value(value).map_err(|e| not_metadata(&e))
    }

    fn snapshot_by_id(&self, id: i64) -> Option<&Snapshot> {
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    /// The schema a snapshot was written with (the current one where it
    /// names none).
    pub fn schema_of(&self, shown: &str, snapshot: &Snapshot) -> Result<&Schema, Error> {
        let id = snapshot.schema_id.or(self.current_schema_id);
        let found = match id {
            Some(id) => self
                .schemas
                .iter()
                .find(|s| s.schema_id == id)
                .or(self.schema.as_ref().filter(|s| s.schema_id == id)),
            None => self.schema.as_ref().or(self.schemas.last()),
        };
        found.ok_or_else(|| {
            Error::bad_input(format!(
                "{shown}: the Iceberg table's metadata has no schema {}",
                id.map_or("at all".to_string(), |id| format!("of id {id}"))
            ))
        })
    }

    /// Whether the files of partition spec `id` are partitioned (an
    /// unknown id counts as partitioned: its deletes stay in their
    /// partition).
    pub fn partitioned(&self, id: i32) -> bool {
        match self.partition_specs.iter().find(|s| s.spec_id == id) {
            Some(spec) => !spec.fields.is_empty(),
            None if id == 0 => self.partition_spec.as_ref().is_none_or(|f| !f.is_empty()),
            None => true,
        }
    }

    /// The snapshot read: `--table-version` (a snapshot id), the one
    /// current at `--table-timestamp` (by the table's snapshot log), or the
    /// current one.
    pub fn pick_snapshot(&self, shown: &str, options: &SourceOptions) -> Result<&Snapshot, Error> {
        let ids = || {
            let mut all: Vec<&Snapshot> = self.snapshots.iter().collect();
            all.sort_by_key(|s| s.timestamp_ms);
            all.iter()
                .map(|s| s.snapshot_id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if let Some(asked) = options.table_version {
            let found = i64::try_from(asked)
                .ok()
                .and_then(|id| self.snapshot_by_id(id));
            return found.ok_or_else(|| {
                Error::usage(format!(
                    "{shown}: --table-version {asked}: the Iceberg table has no snapshot of that \
                     id (its snapshots, oldest first: {})",
                    ids()
                ))
            });
        }
        if let Some(at) = options.table_timestamp_ms {
            // The snapshot log records which snapshot became current when;
            // tables without one fall back on the snapshots' own times.
            let log: Vec<(i64, i64)> = if self.snapshot_log.is_empty() {
                self.snapshots
                    .iter()
                    .map(|s| (s.timestamp_ms, s.snapshot_id))
                    .collect()
            } else {
                self.snapshot_log
                    .iter()
                    .map(|l| (l.timestamp_ms, l.snapshot_id))
                    .collect()
            };
            let current = log
                .iter()
                .filter(|(t, _)| *t <= at)
                .max_by_key(|(t, _)| *t)
                .and_then(|(_, id)| self.snapshot_by_id(*id));
            return current.ok_or_else(|| {
                Error::usage(format!(
                    "{shown}: --table-timestamp: no snapshot of the Iceberg table was current \
                     then (its first was committed {})",
                    log.iter()
                        .map(|(t, _)| *t)
                        .min()
                        .map_or("never".to_string(), rfc3339)
                ))
            });
        }
        self.current_snapshot_id
            .filter(|id| *id != -1)
            .and_then(|id| self.snapshot_by_id(id))
            .ok_or_else(|| {
                Error::bad_input(format!(
                    "{shown}: the Iceberg table has no snapshot yet (no rows to score)"
                ))
            })
    }
}

/// A time in milliseconds since the epoch as RFC 3339 (UTC).
pub(super) fn rfc3339(ms: i64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_types_and_version_one_fields_parse() {
        let text = r#"{
          "format-version": 1, "table-uuid": "x", "location": "/t",
          "last-updated-ms": 1, "last-column-id": 5,
          "schema": {"type": "struct", "fields": [
            {"id": 1, "name": "id", "required": true, "type": "long"},
            {"id": 2, "name": "price", "required": false, "type": "decimal(9, 2)"},
            {"id": 3, "name": "tags", "required": false, "type":
              {"type": "list", "element-id": 4, "element": "string", "element-required": false}},
            {"id": 5, "name": "attrs", "required": false, "type":
              {"type": "map", "key-id": 6, "key": "string", "value-id": 7,
               "value": {"type": "struct", "fields": [
                 {"id": 8, "name": "n", "required": true, "type": "int"}]},
               "value-required": true}}]},
          "partition-spec": [],
          "current-snapshot-id": -1
        }"#;
        let m = TableMetadata::read("t", "m.json", &Bytes::from(text)).unwrap();
        assert_eq!(m.schema.as_ref().unwrap().fields.len(), 4);
        assert!(!m.partitioned(0));
        let options = SourceOptions::default();
        let e = m.pick_snapshot("t", &options).unwrap_err();
        assert!(e.to_string().contains("no snapshot yet"), "{e}");
    }

    #[test]
    fn a_file_without_the_required_fields_is_not_metadata() {
        let e = TableMetadata::read("t", "m.json", &Bytes::from("{}")).unwrap_err();
        assert!(e.to_string().contains("is not table metadata"), "{e}");
    }

    #[test]
    fn a_later_format_version_is_refused_before_parsing() {
        let text = r#"{"format-version": 3, "something": "new"}"#;
        let e = TableMetadata::read("t", "m.json", &Bytes::from(text)).unwrap_err();
        assert!(e.to_string().contains("format version 3"), "{e}");
    }
}
