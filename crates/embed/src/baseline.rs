//! bert_score's rescaling baseline files (`rescale_baseline/<lang>/<model>.tsv`
//! in the bert-score wheel): CSV with a `LAYER,P,R,F` header and one row
//! per layer, the row of `num_layers` N giving the baselines of that layer.
//! Read here so that `--rescale-baseline FILE` rescales exactly as
//! bert_score's `rescale_with_baseline` does.

use std::path::Path;

use refscore_core::Error;

use crate::Baseline;

/// The P, R, F baselines of `layer` in a bert_score baseline file.
pub fn read_baseline(path: &Path, layer: usize) -> Result<Baseline, Error> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config(format!("--rescale-baseline {shown}: {e}")))?;
    // A UTF-8 byte order mark (spreadsheets write one) is not part of the
    // first column's name.
    let mut lines = text
        .strip_prefix('\u{feff}')
        .unwrap_or(&text)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header: Vec<String> = match lines.next() {
        Some((_, h)) => h
            .split(',')
            .map(|c| c.trim().to_ascii_uppercase())
            .collect(),
        None => {
            return Err(Error::config(format!(
                "--rescale-baseline {shown}: empty file"
            )))
        }
    };
    let column = |name: &str| {
        header.iter().position(|c| c == name).ok_or_else(|| {
            Error::config(format!(
                "--rescale-baseline {shown}: line 1: no {name} column (expected a bert_score baseline file: LAYER,P,R,F)"
            ))
        })
    };
    let (l, p, r, f) = (column("LAYER")?, column("P")?, column("R")?, column("F")?);
    let mut layers = Vec::new();
    for (k, line) in lines {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let number = |c: usize| -> Result<f64, Error> {
            cells.get(c).and_then(|v| v.parse::<f64>().ok()).ok_or_else(|| {
                Error::config(format!(
                    "--rescale-baseline {shown}: line {}: expected numbers in LAYER,P,R,F, got '{line}'",
                    k + 1
                ))
            })
        };
        let at = number(l)?;
        layers.push(at);
        if at == layer as f64 {
            let b = [number(p)?, number(r)?, number(f)?].map(|v| v as f32);
            if b.iter().any(|v| !v.is_finite() || *v >= 1.0) {
                return Err(Error::config(format!(
                    "--rescale-baseline {shown}: line {}: baselines must be finite and below 1",
                    k + 1
                )));
            }
            return Ok(b);
        }
    }
    Err(Error::config(format!(
        "--rescale-baseline {shown}: no row for layer {layer} (the file has layers {}); \
         a baseline is only valid for the layer it was measured on",
        layers
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn reads_the_row_of_the_layer() {
        let f = file("LAYER,P,R,F\n0,0.5,0.6,0.55\n1,0.8,0.81,0.805\n");
        assert_eq!(read_baseline(f.path(), 1).unwrap(), [0.8, 0.81, 0.805]);
        assert_eq!(read_baseline(f.path(), 0).unwrap(), [0.5, 0.6, 0.55]);
        let err = read_baseline(f.path(), 7).unwrap_err().message;
        assert!(
            err.contains("no row for layer 7") && err.contains("0, 1"),
            "{err}"
        );
    }

    #[test]
    fn a_byte_order_mark_before_the_header_is_not_part_of_it() {
        let f = file("\u{feff}LAYER,P,R,F\n3,0.5,0.6,0.55\n");
        assert_eq!(read_baseline(f.path(), 3).unwrap(), [0.5, 0.6, 0.55]);
    }

    #[test]
    fn names_the_line_of_bad_content() {
        let f = file("LAYER,P,R,F\n0,0.5,x,0.55\n");
        let err = read_baseline(f.path(), 0).unwrap_err().message;
        assert!(err.contains("line 2"), "{err}");
        let f = file("A,B\n0,1\n");
        let err = read_baseline(f.path(), 0).unwrap_err().message;
        assert!(err.contains("line 1: no LAYER column"), "{err}");
        let f = file("LAYER,P,R,F\n0,1.0,0.5,0.5\n");
        assert!(read_baseline(f.path(), 0).is_err());
    }
}
