//! The `veil` CLI: every subcommand but `serve` talks to a running server's admin API (`/api/v1`) over HTTP.
//! This module holds the global flags, the subcommand tree, the queue argument (`name` or `namespace/name`),
//! the error type and its exit codes, and the dispatch; each resource has its own module.

pub mod cert;
mod client;
pub mod cluster;
mod health;
mod messages;
mod output;
mod queues;
mod redrive;
mod tail;
mod top;
mod transfer;

use std::fmt;
use std::process::ExitCode;
use std::str::FromStr;

use clap::{Args, Subcommand, ValueEnum};

pub use client::Client;
use output::Output;

/// The namespace a queue argument without `/` is in: the one SQS's default account, Azure's development
/// account and KubeMQ share.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Printed after `veil --help`: scripts branch on these, so they are part of the interface.
pub const EXIT_CODES_HELP: &str = "\
Exit codes of the client commands (everything but `serve`):
  0  success
  1  the server refused (prints `error: <Code>: <message>`), or a redrive waited on failed
  2  usage error: bad arguments, unreadable input, a purge or delete not confirmed
  3  the endpoint cannot be reached, or is not a Veil admin endpoint
  4  not found: QueueNotFound, MessageNotFound, RedriveNotFound

A queue argument is `name` (namespace `default`) or `namespace/name`.
Examples:
  veil queues list
  veil --endpoint http://10.0.0.5:9325 --output json queues stats orders | jq .queue.visible";

/// Flags every client command takes, before or after the subcommand.
#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// The admin endpoint of the server to talk to.
    #[arg(
        long,
        env = "VEIL_ENDPOINT",
        default_value = "http://127.0.0.1:9325",
        global = true,
        value_parser = parse_endpoint,
        help_heading = "Client options (every command but serve)"
    )]
    pub endpoint: String,
    /// `table` for people, `json` (the API's answer, pretty) for scripts and jq.
    #[arg(
        long,
        value_enum,
        default_value_t = OutputFormat::Table,
        global = true,
        help_heading = "Client options (every command but serve)"
    )]
    pub output: OutputFormat,
    /// The admin endpoint's bearer token. `veil serve`: required on everything but /healthz and /readyz,
    /// and mandatory when --admin-listen is not loopback. Every other command: sent as `Authorization:
    /// Bearer <token>`.
    #[arg(
        long,
        env = "VEIL_ADMIN_TOKEN",
        hide_env_values = true,
        global = true,
        help_heading = "Admin token (serve and every client command)"
    )]
    pub admin_token: Option<String>,
    /// A PEM file of the CA certificate(s) to trust for an https:// endpoint, instead of the system's roots
    /// (e.g. the ca.pem `veil cert dev` writes).
    #[arg(
        long,
        env = "VEIL_CA_FILE",
        global = true,
        value_name = "PEM",
        help_heading = "Client options (every command but serve)"
    )]
    pub ca_file: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// The endpoint must be an http(s) URL; a trailing `/` is dropped so paths join cleanly.
fn parse_endpoint(value: &str) -> Result<String, String> {
    let trimmed = value.trim_end_matches('/');
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://")) {
        return Err(format!("{value:?} is not an http:// or https:// URL"));
    }
    Ok(trimmed.to_owned())
}

/// The client subcommands, flattened into the binary's command list beside `serve`.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// List, create, delete, inspect and purge queues.
    #[command(subcommand)]
    Queues(queues::QueuesCommand),
    /// Send, peek, receive, delete and update messages; show a message's delivery history.
    #[command(subcommand)]
    Messages(messages::MessagesCommand),
    /// Move a dead-letter queue's messages back (to where they came from, or to --to); show or cancel redrives.
    Redrive(redrive::RedriveArgs),
    /// A live table of every queue, refreshed in place.
    Top(top::TopArgs),
    /// Write a queue's messages to stdout as JSON Lines (a browse: nothing is received or changed).
    Export(transfer::ExportArgs),
    /// Send the messages of a JSON Lines export (stdin) to a queue, in batches.
    Import(transfer::ImportArgs),
    /// Ask the server's /healthz (or /readyz with --ready): exit 0 when it answers 200. The container
    /// image's health check, which has no curl.
    Health(health::HealthArgs),
}

/// A queue named on the command line: `name` (namespace `default`) or `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueArg {
    pub namespace: String,
    pub name: String,
}

impl FromStr for QueueArg {
    type Err = String;

    /// Splits at the first `/`: namespaces never contain one.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let (namespace, name) = match value.split_once('/') {
            Some((namespace, name)) => (namespace, name),
            None => (DEFAULT_NAMESPACE, value),
        };
        if namespace.is_empty() || name.is_empty() {
            return Err(format!(
                "{value:?} is not a queue: give `name` or `namespace/name`"
            ));
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl fmt::Display for QueueArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a client command failed; each maps to one exit code (`EXIT_CODES_HELP`).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The API answered with its error body.
    #[error("{code}: {message}")]
    Api { code: String, message: String },
    #[error("cannot reach {endpoint}: {reason}")]
    Unreachable { endpoint: String, reason: String },
    /// Something answered that is not the admin API (a protocol's port, a proxy).
    #[error(
        "{endpoint} is not a Veil admin endpoint (it answered {answer}). The admin endpoint is the address \
         `veil serve --admin-listen` names, port 9325 unless set otherwise; the SQS, Azure and KubeMQ ports \
         (9324, 10001, 50000 by default) are for those protocols' clients"
    )]
    NotAdmin { endpoint: String, answer: String },
    #[error("{0}")]
    Usage(String),
    #[error("the server's answer is not what this CLI expects: {0}")]
    BadAnswer(String),
    #[error("{0}")]
    Failed(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// The exit code scripts see for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Api { code, .. } if is_not_found(code) => 4,
            CliError::Api { .. } | CliError::BadAnswer(_) | CliError::Failed(_) => 1,
            CliError::Io(_) => 1,
            CliError::Usage(_) => 2,
            CliError::Unreachable { .. } | CliError::NotAdmin { .. } => 3,
        }
    }
}

fn is_not_found(code: &str) -> bool {
    matches!(
        code,
        "QueueNotFound" | "MessageNotFound" | "RedriveNotFound"
    )
}

/// Bodies and binary attributes travel as standard base64 in the API.
pub fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// What every command gets: the client and where and how to print.
pub struct Context {
    pub client: Client,
    pub output: Output,
}

/// Runs one client command and turns its outcome into the process's exit code.
pub fn run(global: GlobalArgs, command: ClientCommand) -> ExitCode {
    let outcome = Client::new(
        &global.endpoint,
        global.admin_token.as_deref(),
        global.ca_file.as_deref(),
    )
    .and_then(|client| {
        let context = Context {
            client,
            output: Output::new(global.output),
        };
        dispatch(&context, command)
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Io(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            // The reader went away (`veil export q | head`): nothing left to say to anyone.
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

fn dispatch(context: &Context, command: ClientCommand) -> Result<(), CliError> {
    match command {
        ClientCommand::Queues(command) => queues::run(context, command),
        ClientCommand::Messages(command) => messages::run(context, command),
        ClientCommand::Redrive(args) => redrive::run(context, args),
        ClientCommand::Top(args) => top::run(context, args),
        ClientCommand::Export(args) => transfer::export(context, args),
        ClientCommand::Import(args) => transfer::import(context, args),
        ClientCommand::Health(args) => health::run(context, args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_in_the_default_namespace() {
        let queue: QueueArg = "orders".parse().unwrap();
        assert_eq!(queue.namespace, "default");
        assert_eq!(queue.name, "orders");
    }

    #[test]
    fn namespace_and_name_split_at_the_first_slash() {
        let queue: QueueArg = "team-a/orders.fifo".parse().unwrap();
        assert_eq!(queue.namespace, "team-a");
        assert_eq!(queue.name, "orders.fifo");
        let nested: QueueArg = "ns/a/b".parse().unwrap();
        assert_eq!(
            (nested.namespace.as_str(), nested.name.as_str()),
            ("ns", "a/b")
        );
        assert_eq!(queue.to_string(), "team-a/orders.fifo");
    }

    #[test]
    fn empty_parts_are_refused() {
        for bad in ["", "/orders", "team-a/", "/"] {
            assert!(bad.parse::<QueueArg>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn the_endpoint_is_an_http_url_without_trailing_slash() {
        assert_eq!(
            parse_endpoint("http://127.0.0.1:9325/").unwrap(),
            "http://127.0.0.1:9325"
        );
        assert!(parse_endpoint("127.0.0.1:9325").is_err());
    }

    fn api(code: &str) -> CliError {
        CliError::Api {
            code: code.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn exit_codes_follow_the_documented_mapping() {
        assert_eq!(api("QueueNotFound").exit_code(), 4);
        assert_eq!(api("MessageNotFound").exit_code(), 4);
        assert_eq!(api("RedriveNotFound").exit_code(), 4);
        assert_eq!(api("ConfirmationMismatch").exit_code(), 1);
        assert_eq!(api("ReceiptInvalid").exit_code(), 1);
        assert_eq!(CliError::Usage("u".into()).exit_code(), 2);
        let unreachable = CliError::Unreachable {
            endpoint: "http://127.0.0.1:1".into(),
            reason: "refused".into(),
        };
        assert_eq!(unreachable.exit_code(), 3);
        assert_eq!(CliError::Failed("f".into()).exit_code(), 1);
    }

    #[test]
    fn an_api_error_prints_code_then_message() {
        assert_eq!(api("QueueNotFound").to_string(), "QueueNotFound: m");
    }
}
