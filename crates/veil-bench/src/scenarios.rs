//! Being written (issue 3): see run.rs for the load generator.
#[derive(clap::Args, Debug)]
pub struct SuiteArgs {}
pub async fn suite(_: SuiteArgs) -> Result<std::process::ExitCode, crate::error::BenchError> {
    Err(crate::error::BenchError::Usage(
        "not implemented yet".into(),
    ))
}
