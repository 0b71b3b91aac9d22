//! veil-bench: Veil's load generator and benchmark suite (issue 3). Being built; see docs/benchmarks.md.

mod target;

fn main() {}
