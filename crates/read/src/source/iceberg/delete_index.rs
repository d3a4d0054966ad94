//! Which delete files reach each data file, without meeting every delete
//! file for every data file: the deletes are bucketed once by what pins
//! them (the one data file a position delete names, else the partition,
//! else nothing for a spec that partitions nothing) and sorted by sequence
//! number, so a data file looks only at the deletes of its own buckets whose
//! sequence number can reach it. The spec's rule itself stays in
//! [`super::manifests::applies`], which still decides every candidate.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use apache_avro::types::Value;

use super::manifests::{applies, Content, DeleteKind, Entry};
use super::metadata::TableMetadata;

/// The deletes that one bucket holds, each as its index in the caller's
/// list, sorted by data sequence number.
#[derive(Default)]
struct Bucket {
    positions: Vec<(i64, usize)>,
    equality: Vec<(i64, usize)>,
}

impl Bucket {
    fn add(&mut self, delete: &Entry, at: usize) {
        match &delete.content {
            Content::Deletes(DeleteKind::Positions) => self.positions.push((delete.sequence, at)),
            Content::Deletes(DeleteKind::Equality(_)) => self.equality.push((delete.sequence, at)),
            Content::Data => {}
        }
    }

    fn sort(&mut self) {
        self.positions.sort_unstable();
        self.equality.sort_unstable();
    }

    /// The deletes whose sequence number can reach a data file of
    /// `sequence`: position deletes of an equal or higher one, equality
    /// deletes of a strictly higher one.
    fn reaching(&self, sequence: i64) -> impl Iterator<Item = usize> + '_ {
        let p = self.positions.partition_point(|(s, _)| *s < sequence);
        let e = self.equality.partition_point(|(s, _)| *s <= sequence);
        self.positions[p..]
            .iter()
            .chain(&self.equality[e..])
            .map(|(_, at)| *at)
    }
}

/// Delete files bucketed by what can pin them to a data file.
pub(super) struct DeleteIndex<'a> {
    metadata: &'a TableMetadata,
    deletes: &'a [Entry],
    /// Position deletes that name their one data file, by that file.
    by_file: HashMap<&'a str, Vec<usize>>,
    /// Deletes of a spec that partitions nothing: they reach every partition.
    everywhere: Bucket,
    /// The other deletes, by spec id and a hash of their partition value.
    by_partition: HashMap<(i32, u64), Bucket>,
}

impl<'a> DeleteIndex<'a> {
    /// Buckets `deletes` (delete entries only).
    pub(super) fn new(metadata: &'a TableMetadata, deletes: &'a [Entry]) -> DeleteIndex<'a> {
        let mut index = DeleteIndex {
            metadata,
            deletes,
            by_file: HashMap::new(),
            everywhere: Bucket::default(),
            by_partition: HashMap::new(),
        };
        for (at, delete) in deletes.iter().enumerate() {
            if let (Content::Deletes(DeleteKind::Positions), Some(file)) =
                (&delete.content, &delete.referenced)
            {
                index.by_file.entry(file.as_str()).or_default().push(at);
            } else if !metadata.partitioned(delete.spec_id) {
                index.everywhere.add(delete, at);
            } else {
                index
                    .by_partition
                    .entry((delete.spec_id, partition_hash(&delete.partition)))
                    .or_default()
                    .add(delete, at);
            }
        }
        index.everywhere.sort();
        for bucket in index.by_partition.values_mut() {
            bucket.sort();
        }
        index
    }

    /// The indices (ascending) of the deletes that apply to `data`.
    pub(super) fn applying(&self, data: &Entry) -> Vec<usize> {
        let named = self.by_file.get(data.path.as_str()).into_iter().flatten();
        let partition = self
            .by_partition
            .get(&(data.spec_id, partition_hash(&data.partition)))
            .into_iter()
            .flat_map(|b| b.reaching(data.sequence));
        let mut out: Vec<usize> = named
            .copied()
            .chain(self.everywhere.reaching(data.sequence))
            .chain(partition)
            .filter(|&at| applies(self.metadata, &self.deletes[at], data))
            .collect();
        out.sort_unstable();
        out
    }
}

/// A hash of a partition value such that equal values (by `==`, as
/// [`applies`] compares them) hash the same. Values of kinds it does not
/// look into (floats, decimals, …) add nothing, so they share a bucket and
/// `applies` tells them apart.
fn partition_hash(value: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    feed(value, &mut h);
    h.finish()
}

fn feed(value: &Value, h: &mut DefaultHasher) {
    match value {
        Value::Record(fields) => {
            for (name, v) in fields {
                name.hash(h);
                feed(v, h);
            }
        }
        Value::Union(_, inner) => feed(inner, h),
        Value::Array(items) => items.iter().for_each(|v| feed(v, h)),
        Value::Boolean(b) => b.hash(h),
        Value::Int(v) | Value::Date(v) | Value::TimeMillis(v) => v.hash(h),
        Value::Long(v)
        | Value::TimeMicros(v)
        | Value::TimestampMillis(v)
        | Value::TimestampMicros(v)
        | Value::TimestampNanos(v)
        | Value::LocalTimestampMillis(v)
        | Value::LocalTimestampMicros(v)
        | Value::LocalTimestampNanos(v) => v.hash(h),
        Value::String(s) | Value::Enum(_, s) => s.hash(h),
        Value::Bytes(b) | Value::Fixed(_, b) => b.hash(h),
        Value::Uuid(u) => u.hash(h),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// Spec 0 partitions by `night`, spec 1 partitions nothing.
    fn metadata() -> TableMetadata {
        let text = r#"{"format-version": 2, "location": "/t", "last-updated-ms": 1,
            "partition-specs": [
                {"spec-id": 0, "fields": [{"name": "night", "transform": "identity",
                                           "source-id": 1, "field-id": 1000}]},
                {"spec-id": 1, "fields": []}]}"#;
        TableMetadata::read("t", "m.json", &Bytes::from(text)).unwrap()
    }

    /// A small xorshift generator, so the tables are the same on every run.
    struct Dice(u64);

    impl Dice {
        fn roll(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn partition(dice: &mut Dice) -> Value {
        let night = match dice.roll(6) {
            // Equal by `==` though their bits differ: must meet.
            4 => Value::Float(0.0),
            5 => Value::Float(-0.0),
            k => Value::String(["mon", "tue", "wed", "thu"][k as usize].into()),
        };
        Value::Record(vec![("night".into(), night)])
    }

    fn entry(dice: &mut Dice, path: String, content: Content) -> Entry {
        Entry {
            path,
            size: 1,
            sequence: dice.roll(12) as i64,
            spec_id: dice.roll(2) as i32,
            partition: partition(dice),
            content,
            referenced: None,
        }
    }

    #[test]
    fn the_index_finds_exactly_what_meeting_every_delete_finds() {
        let metadata = metadata();
        let mut dice = Dice(0x9E37_79B9_7F4A_7C15);
        let data: Vec<Entry> = (0..800)
            .map(|k| entry(&mut dice, format!("d{k:04}"), Content::Data))
            .collect();
        let deletes: Vec<Entry> = (0..600)
            .map(|k| {
                let equality = dice.roll(2) == 0;
                let kind = if equality {
                    DeleteKind::Equality(vec![1])
                } else {
                    DeleteKind::Positions
                };
                let mut d = entry(&mut dice, format!("x{k:04}"), Content::Deletes(kind));
                // Half the position deletes name a data file (some of
                // them one the snapshot does not hold).
                if !equality && dice.roll(2) == 0 {
                    d.referenced = Some(format!("d{:04}", dice.roll(900)));
                }
                d
            })
            .collect();
        let index = DeleteIndex::new(&metadata, &deletes);
        let mut pairs = 0;
        for file in &data {
            let every: Vec<usize> = (0..deletes.len())
                .filter(|&at| applies(&metadata, &deletes[at], file))
                .collect();
            assert_eq!(index.applying(file), every, "data file {}", file.path);
            pairs += every.len();
        }
        // The rules both select some pairs and refuse most.
        assert!(pairs > data.len(), "{pairs}");
        assert!(pairs < data.len() * deletes.len() / 2, "{pairs}");
    }
}
