//! The vocabulary of what goes wrong on a node: why it failed ([`FailureClass`]: keadm's
//! own failures, read from its output, and keadm-batch's, such as a node it could not
//! reach or log in to) and what the pre-flight probe found ([`FindingId`], [`Finding`]),
//! with the sentences that explain each and say what to do.
//!
//! Next to a leaf: it knows only `keadm_cmd`'s [`Task`](crate::keadm_cmd::Task), since
//! what to do about a class depends on the command the node ran. `kubeedge` decides
//! classes and findings, `outcome` records them, `report` groups and prints them, and none
//! of those has to reach into another for the names.
//! The ids serialize to the snake_case strings summary.json and journal.jsonl have always
//! held (docs/summary.md), and `--class` takes.
//!
//! `class` holds the failure classes, `finding` the probe's findings.

mod class;
mod finding;

pub use class::{FailureClass, UnknownClass};
pub use finding::{Finding, FindingId};
