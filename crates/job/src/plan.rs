//! Which rows a run covers: shards select whole units (runs of row groups),
//! and a resumed run subtracts the rows its committed parts already hold.

use std::fmt;
use std::str::FromStr;

use refscore_read::Unit;

/// `--shard K/N`: the K-th (1-based) of N disjoint parts of the input,
/// made of whole units (row groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// K, from 1.
    pub index: u32,
    /// N.
    pub count: u32,
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("--shard {s}: expected K/N with 1 <= K <= N, e.g. 2/8");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = k.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The units of `shard` (all units without one). Units go to shards in
/// contiguous runs balanced by rows: a unit belongs to the shard in whose
/// share of the rows its first row falls. The same input always gives the
/// same split, the shards are disjoint, they cover every unit, and their
/// outputs in shard order are the unsharded output.
pub fn shard_units(units: &[Unit], shard: Option<Shard>) -> Vec<Unit> {
    let Some(shard) = shard else {
        return units.to_vec();
    };
    let total: u64 = units.iter().map(|u| u.rows).sum();
    units
        .iter()
        .filter(|u| {
            let owner = if total == 0 {
                0
            } else {
                ((u.first_row as u128 * shard.count as u128) / total as u128) as u32
            };
            owner + 1 == shard.index
        })
        .copied()
        .collect()
}

/// Rows `from..to` of one unit, counted within the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The unit.
    pub unit: Unit,
    /// First row within the unit.
    pub from: u64,
    /// One past the last row within the unit.
    pub to: u64,
}

impl Range {
    /// Rows in the range.
    pub fn rows(&self) -> u64 {
        self.to - self.from
    }
}

/// The parts of `units` not covered by `done` (sorted, non-overlapping
/// global row intervals `[start, end)`).
pub fn remaining(units: &[Unit], done: &[(u64, u64)]) -> Vec<Range> {
    let mut out = Vec::new();
    for unit in units {
        let (start, end) = (unit.first_row, unit.first_row + unit.rows);
        let mut cursor = start;
        for &(a, b) in done {
            if b <= cursor || a >= end {
                continue;
            }
            if a > cursor {
                out.push(Range {
                    unit: *unit,
                    from: cursor - start,
                    to: a - start,
                });
            }
            cursor = cursor.max(b);
        }
        if cursor < end {
            out.push(Range {
                unit: *unit,
                from: cursor - start,
                to: unit.rows,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(sizes: &[u64]) -> Vec<Unit> {
        let mut row = 0;
        sizes
            .iter()
            .enumerate()
            .map(|(i, &rows)| {
                let u = Unit {
                    file: i / 2,
                    row_group: i % 2,
                    row_groups: 1,
                    first_row: row,
                    rows,
                };
                row += rows;
                u
            })
            .collect()
    }

    #[test]
    fn shards_are_disjoint_contiguous_and_cover_everything() {
        let all = units(&[10, 3, 50, 7, 7, 1, 30, 2]);
        for n in 1..=10 {
            let mut joined = Vec::new();
            for k in 1..=n {
                joined.extend(shard_units(&all, Some(Shard { index: k, count: n })));
            }
            assert_eq!(joined, all, "{n} shards in order give every unit once");
        }
    }

    #[test]
    fn shard_syntax() {
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/3", "4/3", "1/0", "x/2", "3", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn remaining_subtracts_done_rows() {
        let all = units(&[10, 10]);
        assert_eq!(remaining(&all, &[]).len(), 2);
        let r = remaining(&all, &[(0, 4), (6, 13)]);
        let got: Vec<(u64, u64, u64)> =
            r.iter().map(|r| (r.unit.first_row, r.from, r.to)).collect();
        assert_eq!(got, vec![(0, 4, 6), (10, 3, 10)]);
        assert!(remaining(&all, &[(0, 20)]).is_empty());
    }
}
