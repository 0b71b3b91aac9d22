//! Shrinking a failing run to a minimal one: delta debugging over its operation list. Chunks of operations are
//! dropped (halves, then quarters, down to single operations) and the rest is re-run; a removal is kept when
//! the run still fails with a violation of the same kind. Operations resolve what they name when they run, so
//! every sub-list is a valid run.

use crate::limits::SHRINK_RUNS_MAX;
use crate::ops::{Op, Scenario};
use crate::run::{run, Options, Violation};

/// The smallest failing scenario found, its violation, and how many runs the search took.
pub struct Shrunk {
    pub scenario: Scenario,
    pub violation: Violation,
    pub runs: usize,
}

pub fn shrink(scenario: &Scenario, options: Options, violation: Violation) -> Shrunk {
    let kind = violation.kind;
    let mut runs = 0;
    let mut best = scenario.clone();
    let mut best_violation = violation;
    let attempt = |ops: Vec<Op>, runs: &mut usize| -> Option<(Scenario, Violation)> {
        *runs += 1;
        let candidate = Scenario {
            ops,
            ..scenario.clone()
        };
        let found = run(&candidate, options).violation?;
        (found.kind == kind).then_some((candidate, found))
    };
    // Operations after the failing step matter only to a failure found at the end.
    if best_violation.step.saturating_add(1) < best.ops.len() {
        let ops = best.ops[..=best_violation.step].to_vec();
        if let Some((s, v)) = attempt(ops, &mut runs) {
            (best, best_violation) = (s, v);
        }
    }
    let mut chunk = (best.ops.len() / 2).max(1);
    loop {
        let mut removed = false;
        let mut start = 0;
        while start < best.ops.len() && runs < SHRINK_RUNS_MAX {
            let end = (start + chunk).min(best.ops.len());
            let mut ops = best.ops.clone();
            ops.drain(start..end);
            match attempt(ops, &mut runs) {
                Some((mut s, v)) => {
                    if v.step.saturating_add(1) < s.ops.len() {
                        s.ops.truncate(v.step + 1);
                    }
                    (best, best_violation) = (s, v);
                    removed = true;
                }
                None => start += chunk,
            }
        }
        if runs >= SHRINK_RUNS_MAX || (chunk == 1 && !removed) {
            break;
        }
        if !removed {
            chunk = (chunk / 2).max(1);
        }
    }
    Shrunk {
        scenario: best,
        violation: best_violation,
        runs,
    }
}
