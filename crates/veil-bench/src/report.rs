//! Being written (issue 3): see run.rs for the load generator.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {}
pub fn report(_: ReportArgs) -> Result<(), crate::error::BenchError> {
    Err(crate::error::BenchError::Usage(
        "not implemented yet".into(),
    ))
}
