//! Deciding one judge metric for one row: the decision model (what a
//! value is and what settled it) and the steps that settle it.

mod decided;
mod outcome;

pub(crate) use decided::{add_usage, fail, Decided};
pub(crate) use outcome::{Decisions, Outcome, Source};
