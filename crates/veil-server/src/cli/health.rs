//! `veil health`: one probe of a running server, for places without curl — the container image's
//! `HEALTHCHECK` runs it inside an image that holds nothing but the `veil` binary. Exit 0 when the probe
//! answers 200, 1 when it answers anything else (`/readyz` is 503 while the store opens and once a stop
//! began), 3 when nothing answers.

use clap::Args;

use super::{CliError, Context};

#[derive(Args, Debug)]
pub struct HealthArgs {
    /// Ask /readyz (store open, every listener bound, not stopping) instead of /healthz (the process serves).
    #[arg(long)]
    ready: bool,
}

pub fn run(context: &Context, args: HealthArgs) -> Result<(), CliError> {
    let path = if args.ready { "/readyz" } else { "/healthz" };
    let (status, text) = context.client.probe(path)?;
    let said = text.trim();
    if status == 200 {
        println!("{said}");
        return Ok(());
    }
    Err(CliError::Failed(format!(
        "{}{path} answered {status}: {said}",
        context.client.endpoint()
    )))
}
