//! Natural-language inference as metrics: which of an NLI model's labels is
//! entailment (and contradiction), and the metrics of docs/metrics.md from
//! the two directions' label distributions.

/// The indices of an NLI model's entailment and contradiction labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NliLabels {
    /// The entailment label's index.
    pub entailment: usize,
    /// The contradiction label's index, where the model has one (a
    /// two-way entailment/not_entailment model has none).
    pub contradiction: Option<usize>,
}

impl NliLabels {
    /// Finds the labels by name (`id2label`): `entailment` (or `entail`)
    /// and `contradiction` (or `contradict`), in any case. Models whose
    /// labels are `LABEL_0…` name none: `--nli-labels` says which is which.
    pub fn from_names(labels: &[String]) -> Result<NliLabels, String> {
        let find = |names: &[&str]| {
            labels
                .iter()
                .position(|l| names.contains(&l.trim().to_ascii_lowercase().as_str()))
        };
        let entailment = find(&["entailment", "entail", "entailed"]).ok_or_else(|| {
            format!(
                "its labels ({}) name no entailment; say which index is with --nli-labels entailment=I[,contradiction=J]",
                labels.join(", ")
            )
        })?;
        Ok(NliLabels {
            entailment,
            contradiction: find(&["contradiction", "contradict", "contradicted"]),
        })
    }

    /// Reads `--nli-labels entailment=I[,contradiction=J]` for a model of
    /// `labels` outputs; the error says what is wrong with the value.
    pub fn parse(spec: &str, labels: usize) -> Result<NliLabels, String> {
        let (mut entailment, mut contradiction) = (None, None);
        for part in spec.split(',').map(str::trim) {
            let (name, index) = part
                .split_once('=')
                .ok_or_else(|| "expected entailment=I[,contradiction=J]".to_string())?;
            let index: usize = index
                .trim()
                .parse()
                .ok()
                .filter(|&i| i < labels)
                .ok_or_else(|| format!("'{index}' is not a label index below {labels}"))?;
            let slot = match name.trim() {
                "entailment" => &mut entailment,
                "contradiction" => &mut contradiction,
                other => return Err(format!("'{other}' is not entailment or contradiction")),
            };
            if slot.replace(index).is_some() {
                return Err(format!("'{}' is given twice", name.trim()));
            }
        }
        let entailment = entailment.ok_or_else(|| "entailment=I is needed".to_string())?;
        if contradiction == Some(entailment) {
            return Err("entailment and contradiction are the same label".to_string());
        }
        Ok(NliLabels {
            entailment,
            contradiction,
        })
    }
}

/// The NLI metrics of one (reference, output) row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NliScores {
    /// P(entailment | premise reference, hypothesis output): nothing in the
    /// output goes beyond the reference.
    pub precision: f32,
    /// P(entailment | premise output, hypothesis reference): the output
    /// states what the reference states.
    pub recall: f32,
    /// min(precision, recall): two-way entailment, a local Meaning Match.
    pub equivalence: f32,
    /// The larger P(contradiction) of the two directions, where the model
    /// has the label.
    pub contradiction: Option<f32>,
}

impl NliScores {
    /// From the label distributions of (reference → output) and
    /// (output → reference).
    pub fn of(forward: &[f32], backward: &[f32], labels: NliLabels) -> NliScores {
        let (precision, recall) = (forward[labels.entailment], backward[labels.entailment]);
        NliScores {
            precision,
            recall,
            equivalence: precision.min(recall),
            contradiction: labels.contradiction.map(|c| forward[c].max(backward[c])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(labels: &[&str]) -> Vec<String> {
        labels.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn both_public_label_orders_are_found_by_name() {
        // cross-encoder/nli-*: contradiction, entailment, neutral.
        let l = NliLabels::from_names(&names(&["contradiction", "entailment", "neutral"])).unwrap();
        assert_eq!((l.entailment, l.contradiction), (1, Some(0)));
        // MoritzLaurer: entailment, neutral, contradiction.
        let l = NliLabels::from_names(&names(&["ENTAILMENT", "neutral", "Contradiction"])).unwrap();
        assert_eq!((l.entailment, l.contradiction), (0, Some(2)));
        // Two-way: no contradiction; not_entailment is not entailment.
        let l = NliLabels::from_names(&names(&["not_entailment", "entailment"])).unwrap();
        assert_eq!((l.entailment, l.contradiction), (1, None));
        let err = NliLabels::from_names(&names(&["LABEL_0", "LABEL_1"])).unwrap_err();
        assert!(err.contains("--nli-labels"), "{err}");
    }

    #[test]
    fn nli_labels_flag_is_checked() {
        let l = NliLabels::parse("entailment=1", 2).unwrap();
        assert_eq!((l.entailment, l.contradiction), (1, None));
        let l = NliLabels::parse("contradiction=0, entailment=2", 3).unwrap();
        assert_eq!((l.entailment, l.contradiction), (2, Some(0)));
        for bad in [
            "entailment=2",
            "entailment",
            "contradiction=0",
            "entailment=0,entailment=1",
            "entailment=1,contradiction=1",
            "neutral=1,entailment=0",
        ] {
            assert!(NliLabels::parse(bad, 2).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_metrics_read_both_directions() {
        let labels = NliLabels {
            entailment: 1,
            contradiction: Some(0),
        };
        let s = NliScores::of(&[0.1, 0.7, 0.2], &[0.3, 0.4, 0.3], labels);
        assert_eq!((s.precision, s.recall, s.equivalence), (0.7, 0.4, 0.4));
        assert_eq!(s.contradiction, Some(0.3));
        let two_way = NliLabels {
            entailment: 0,
            contradiction: None,
        };
        assert_eq!(
            NliScores::of(&[0.9, 0.1], &[0.2, 0.8], two_way).contradiction,
            None
        );
    }
}
