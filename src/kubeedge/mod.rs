//! What keadm-batch knows about KubeEdge itself, beyond running keadm: the join token,
//! the pre-flight probe for `keadm join`, the images a join needs, and reading why a join
//! failed. Each part is
//! pure or returns shell text; the pipeline decides when to use them. The facts behind
//! them are in docs/kubeedge.md.

pub mod before_run;
pub mod classify;
pub mod clock_skew;
pub mod images;
pub mod preflight;
pub mod token;

pub use classify::{FailureClass, Step, UnknownClass, classify, last_step};
pub use preflight::{Finding, FindingId};
pub use token::{JoinToken, Lifetime, TokenError};
