//! `veil cluster rotate-token`: rotates the key of the cluster's internal RPC token without downtime
//! (docs/cluster.md "Rotating the cluster token"). It talks to the cluster's home database, not to a node:
//! the nodes read the keys from there every round, so the rotation needs no signal, restart or file on any
//! node. The schedule is the database's (veil_postgres::rpc_keys).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use veil_postgres::rpc_keys::{
    self, RotateError, ROTATION_STEP_S_DEFAULT, ROTATION_STEP_S_MAX, ROTATION_STEP_S_MIN,
};
use veil_postgres::PgOptions;

use super::OutputFormat;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Rotate the key of the token the nodes' internal RPC carries, without downtime: every node accepts the
    /// new key at once, sends it after one step, and refuses the old one after a second step.
    RotateToken(RotateTokenArgs),
}

#[derive(Args, Debug)]
pub struct RotateTokenArgs {
    /// The cluster's home database (the nodes' --store; with shards, shard 0)
    #[arg(long, env = "VEIL_STORE")]
    pub store: String,
    /// Schema of Veil's tables, as the nodes' --pg-schema
    #[arg(long, env = "VEIL_PG_SCHEMA", default_value = veil_postgres::connect::SCHEMA_DEFAULT)]
    pub pg_schema: String,
    /// Seconds between the steps: the new key is sent one step from now, the old one refused two steps from
    /// now. Keep it well above how long a node may go without reaching the database (its lease TTL)
    #[arg(long, default_value_t = ROTATION_STEP_S_DEFAULT,
          value_parser = clap::value_parser!(u64).range(ROTATION_STEP_S_MIN..=ROTATION_STEP_S_MAX))]
    pub step_s: u64,
}

/// Runs a cluster command; exit codes as the client commands' (`veil --help`).
pub fn run(command: ClusterCommand, output: OutputFormat) -> ExitCode {
    let ClusterCommand::RotateToken(args) = command;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(rotate_token(&args)) {
        Ok(key) => {
            print_rotation(&key, output);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(exit_code(&error))
        }
    }
}

async fn rotate_token(args: &RotateTokenArgs) -> Result<rpc_keys::RpcKey, RotateError> {
    let mut options = PgOptions::new(args.store.clone());
    options.schema = args.pg_schema.clone();
    let mut client = veil_postgres::connect(&options).await?;
    let step_ms = args.step_s.saturating_mul(1_000);
    rpc_keys::rotate(&mut client, step_ms, rand::random).await
}

/// 1: refused (a rotation under way, no cluster there); 3: the database cannot be reached or used.
fn exit_code(error: &RotateError) -> u8 {
    match error {
        RotateError::NoCluster | RotateError::UnderWay { .. } => 1,
        RotateError::Store(_) => 3,
    }
}

fn print_rotation(key: &rpc_keys::RpcKey, output: OutputFormat) {
    let sends_from = rfc3339(key.sends_from_ms);
    let previous_until = rfc3339(key.previous_until_ms);
    match output {
        OutputFormat::Json => println!(
            "{}",
            serde_json::json!({
                "generation": key.generation,
                "sends_from": sends_from,
                "previous_refused_from": previous_until,
            })
        ),
        OutputFormat::Table => println!(
            "generation {}: accepted by every node now, sent from {sends_from}; generation {} refused from \
             {previous_until}",
            key.generation,
            key.generation - 1
        ),
    }
}

fn rfc3339(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|at| {
            at.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms after the epoch"))
}
