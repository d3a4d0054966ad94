//! Scan planning for one snapshot, as the Iceberg spec defines it: the
//! manifest list names the snapshot's manifests, the manifests its live
//! data and delete files, and the spec's sequence-number and partition
//! rules say which delete files apply to which data file. Both kinds of
//! manifest file are Avro object containers, read with `apache-avro`.

use apache_avro::types::Value;
use bytes::Bytes;
use refscore_core::Error;

use super::delete_index::DeleteIndex;
use super::metadata::{Snapshot, TableMetadata};

/// One data file of the snapshot, with the delete files that apply to it.
#[derive(Debug)]
pub(super) struct DataTask {
    pub path: String,
    pub size: u64,
    pub deletes: Vec<DeleteTask>,
}

/// A delete file that applies to a data file.
#[derive(Debug, Clone)]
pub(super) struct DeleteTask {
    pub path: String,
    pub kind: DeleteKind,
}

/// What a delete file names: row positions, or the values of some columns
/// (their field ids).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum DeleteKind {
    Positions,
    Equality(Vec<i32>),
}

/// A live file entry of a manifest.
pub(super) struct Entry {
    pub path: String,
    pub size: u64,
    /// Its data sequence number.
    pub sequence: i64,
    pub spec_id: i32,
    pub partition: Value,
    pub content: Content,
    /// A position delete file's one data file, where it names it.
    pub referenced: Option<String>,
}

/// What a manifest entry holds: rows, or deletes of rows.
pub(super) enum Content {
    Data,
    Deletes(DeleteKind),
}

/// A manifest as the manifest list names it.
struct Manifest {
    path: String,
    sequence: i64,
    spec_id: Option<i32>,
}

/// The snapshot's data files (ordered by path, so units, shards and resume
/// do not depend on the manifests' order) with their deletes.
pub(super) fn plan(
    shown: &str,
    metadata: &TableMetadata,
    snapshot: &Snapshot,
    read: &(dyn Fn(&str) -> Result<Bytes, Error> + Sync),
) -> Result<Vec<DataTask>, Error> {
    let manifests = match &snapshot.manifest_list {
        Some(list) => manifest_list(shown, list, &read(list)?)?,
        None => snapshot
            .manifests
            .iter()
            .map(|path| Manifest {
                path: path.clone(),
                sequence: 0,
                spec_id: None,
            })
            .collect(),
    };
    // One request each on a store: fetched side by side.
    let bytes = crate::source::side_by_side(&manifests, |m| read(&m.path));
    let mut data = Vec::new();
    let mut deletes = Vec::new();
    for (manifest, bytes) in manifests.iter().zip(bytes) {
        for entry in manifest_entries(shown, manifest, &bytes?)? {
            match &entry.content {
                Content::Data => data.push(entry),
                Content::Deletes(_) => deletes.push(entry),
            }
        }
    }
    data.sort_by(|a, b| a.path.cmp(&b.path));
    deletes.sort_by(|a, b| a.path.cmp(&b.path));
    // Each data file meets only the deletes that can reach it, not all of
    // them; in the order of `deletes` (by path), as meeting all would give.
    let index = DeleteIndex::new(metadata, &deletes);
    Ok(data
        .into_iter()
        .map(|file| {
            let applying = index
                .applying(&file)
                .into_iter()
                .map(|at| &deletes[at])
                .map(|d| DeleteTask {
                    path: d.path.clone(),
                    kind: match &d.content {
                        Content::Deletes(kind) => kind.clone(),
                        Content::Data => unreachable!("delete entries only"),
                    },
                })
                .collect();
            DataTask {
                path: file.path,
                size: file.size,
                deletes: applying,
            }
        })
        .collect())
}

/// The spec's rule: a delete file reaches data files of its partition (of
/// any partition, where its spec partitions nothing); position deletes
/// those of an equal or lower data sequence number (and only the file
/// they name, where they name one), equality deletes those of a strictly
/// lower one.
pub(super) fn applies(metadata: &TableMetadata, delete: &Entry, data: &Entry) -> bool {
    let in_scope = !metadata.partitioned(delete.spec_id)
        || (delete.spec_id == data.spec_id && delete.partition == data.partition);
    in_scope
        && match &delete.content {
            Content::Deletes(DeleteKind::Positions) => {
                data.sequence <= delete.sequence
                    && delete.referenced.as_ref().is_none_or(|p| *p == data.path)
            }
            Content::Deletes(DeleteKind::Equality(_)) => data.sequence < delete.sequence,
            Content::Data => false,
        }
}

/// The Avro records of one container file.
fn records(shown: &str, what: &str, path: &str, bytes: &Bytes) -> Result<Vec<Value>, Error> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::bad_input(format!(
            "{shown}: the Iceberg {what} {} is not readable Avro: {e}",
            refscore_store::redact(path)
        ))
    };
    let reader = apache_avro::Reader::new(bytes.as_ref()).map_err(|e| bad(&e))?;
    reader.map(|r| r.map_err(|e| bad(&e))).collect()
}

/// A record's field, through a union (`["null", T]`), `None` where absent
/// or null.
fn field<'v>(record: &'v Value, name: &str) -> Option<&'v Value> {
    let Value::Record(fields) = record else {
        return None;
    };
    let mut value = &fields.iter().find(|(n, _)| n == name)?.1;
    while let Value::Union(_, inner) = value {
        value = inner;
    }
    (!matches!(value, Value::Null)).then_some(value)
}

fn long(record: &Value, name: &str) -> Option<i64> {
    match field(record, name)? {
        Value::Long(v) => Some(*v),
        Value::Int(v) => Some(i64::from(*v)),
        _ => None,
    }
}

fn text<'v>(record: &'v Value, name: &str) -> Option<&'v str> {
    match field(record, name)? {
        Value::String(s) | Value::Enum(_, s) => Some(s),
        _ => None,
    }
}

/// A required field, or a one-line error naming it.
fn required<T>(shown: &str, path: &str, name: &str, value: Option<T>) -> Result<T, Error> {
    value.ok_or_else(|| {
        Error::bad_input(format!(
            "{shown}: the Iceberg manifest file {} has an entry without '{name}'",
            refscore_store::redact(path)
        ))
    })
}

/// The manifests of a manifest list.
fn manifest_list(shown: &str, path: &str, bytes: &Bytes) -> Result<Vec<Manifest>, Error> {
    records(shown, "manifest list", path, bytes)?
        .iter()
        .map(|r| {
            Ok(Manifest {
                path: required(shown, path, "manifest_path", text(r, "manifest_path"))?.to_string(),
                sequence: long(r, "sequence_number").unwrap_or(0),
                spec_id: long(r, "partition_spec_id").map(|v| v as i32),
            })
        })
        .collect()
}

/// The live entries (added or existing, not deleted) of one manifest.
fn manifest_entries(shown: &str, manifest: &Manifest, bytes: &Bytes) -> Result<Vec<Entry>, Error> {
    let path = manifest.path.as_str();
    // A manifest named inline (format version 1) carries its spec id in
    // its own metadata.
    let spec_id = match manifest.spec_id {
        Some(id) => id,
        None => apache_avro::Reader::new(bytes.as_ref())
            .ok()
            .and_then(|r| {
                let id = r.user_metadata().get("partition-spec-id")?;
                std::str::from_utf8(id).ok()?.parse().ok()
            })
            .unwrap_or(0),
    };
    let mut out = Vec::new();
    for entry in records(shown, "manifest file", path, bytes)? {
        // 0 existing, 1 added, 2 deleted.
        if required(shown, path, "status", long(&entry, "status"))? == 2 {
            continue;
        }
        let file = required(shown, path, "data_file", field(&entry, "data_file"))?;
        let file_path = required(shown, path, "file_path", text(file, "file_path"))?;
        let format = text(file, "file_format").unwrap_or("PARQUET");
        if !format.eq_ignore_ascii_case("parquet") {
            return Err(Error::config(format!(
                "{shown}: the Iceberg table holds {} in {format} format, and refscore reads \
                 Parquet data and delete files only",
                refscore_store::redact(file_path)
            )));
        }
        let content = match long(file, "content").unwrap_or(0) {
            0 => Content::Data,
            1 => Content::Deletes(DeleteKind::Positions),
            2 => {
                let ids = match field(file, "equality_ids") {
                    Some(Value::Array(ids)) => ids
                        .iter()
                        .filter_map(|v| match v {
                            Value::Int(id) => Some(*id),
                            Value::Long(id) => i32::try_from(*id).ok(),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                Content::Deletes(DeleteKind::Equality(ids))
            }
            other => {
                return Err(Error::config(format!(
                    "{shown}: the Iceberg manifest file {} names a file of content {other}, \
                     which refscore's Iceberg reader does not read",
                    refscore_store::redact(path)
                )))
            }
        };
        out.push(Entry {
            path: file_path.to_string(),
            size: required(
                shown,
                path,
                "file_size_in_bytes",
                long(file, "file_size_in_bytes"),
            )?
            .max(0) as u64,
            // Null: inherited from the manifest (the snapshot that added it).
            sequence: long(&entry, "sequence_number").unwrap_or(manifest.sequence),
            spec_id,
            partition: field(file, "partition").cloned().unwrap_or(Value::Null),
            content,
            referenced: text(file, "referenced_data_file").map(str::to_string),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(partitioned: bool) -> TableMetadata {
        let fields = if partitioned {
            r#"[{"name": "night", "transform": "identity", "source-id": 1, "field-id": 1000}]"#
        } else {
            "[]"
        };
        let text = format!(
            r#"{{"format-version": 2, "location": "/t", "last-updated-ms": 1,
                "partition-specs": [{{"spec-id": 0, "fields": {fields}}}]}}"#
        );
        TableMetadata::read("t", "m.json", &Bytes::from(text)).unwrap()
    }

    fn entry(path: &str, sequence: i64, part: &str, content: Content) -> Entry {
        Entry {
            path: path.to_string(),
            size: 1,
            sequence,
            spec_id: 0,
            partition: Value::Record(vec![("night".into(), Value::String(part.into()))]),
            content,
            referenced: None,
        }
    }

    #[test]
    fn deletes_apply_by_sequence_number_partition_and_named_file() {
        let plain = metadata(false);
        let parts = metadata(true);
        let data = entry("d1", 3, "mon", Content::Data);
        let positions = |seq| entry("p", seq, "mon", Content::Deletes(DeleteKind::Positions));
        let equality = |seq, part| {
            entry(
                "e",
                seq,
                part,
                Content::Deletes(DeleteKind::Equality(vec![1])),
            )
        };
        // Position deletes reach files of the same sequence number, equality deletes do not.
        assert!(applies(&plain, &positions(3), &data));
        assert!(!applies(&plain, &positions(2), &data));
        assert!(!applies(&plain, &equality(3, "mon"), &data));
        assert!(applies(&plain, &equality(4, "tue"), &data));
        // A partitioned spec keeps a delete in its partition.
        assert!(applies(&parts, &equality(4, "mon"), &data));
        assert!(!applies(&parts, &equality(4, "tue"), &data));
        // A position delete naming one data file reaches that file only.
        let mut named = positions(5);
        named.referenced = Some("d2".into());
        assert!(!applies(&plain, &named, &data));
        named.referenced = Some("d1".into());
        assert!(applies(&plain, &named, &data));
    }
}
