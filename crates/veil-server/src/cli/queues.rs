//! `veil queues`: list, create, delete, stats and purge. A delete and a purge destroy messages, so both ask
//! for the queue's name on a terminal unless `--yes` is given (a purge sends what was typed as the API's
//! `confirm`; a delete compares it here); with no terminal to ask on and no `--yes` they refuse rather than
//! guess.

use std::io::{BufRead, IsTerminal, Write};

use clap::{Args, Subcommand};
use serde::Deserialize;
use serde_json::{json, Value};

use super::client::{queue_path, typed};
use super::output::{age, bytes, or_dash, pairs, queue_cell, Table};
use super::{CliError, Context, QueueArg};

#[derive(Subcommand, Debug)]
pub enum QueuesCommand {
    /// Every queue of every protocol with its counts.
    #[command(
        after_help = "Examples:\n  veil queues list\n  veil queues list --namespace team-a --prefix orders\n  veil --output json queues list | jq -r '.queues[].name'"
    )]
    List(ListArgs),
    /// Create a queue (as the admin protocol).
    #[command(
        after_help = "Examples:\n  veil queues create orders --visibility-timeout 60\n  veil queues create team-a/orders.fifo --fifo --retention 86400"
    )]
    Create(CreateArgs),
    /// Delete a queue and every message in it; asks for its name unless --yes.
    #[command(
        after_help = "Without --yes and without a terminal to ask on, delete refuses (exit 2).\n\nExamples:\n  veil queues delete orders          # type `orders` to confirm\n  veil queues delete team-a/orders --yes    # scripts"
    )]
    Delete(ConfirmedArgs),
    /// A queue's counts, settings, dead-letter rule and totals.
    #[command(
        after_help = "Examples:\n  veil queues stats orders\n  veil --output json queues stats orders | jq .queue.visible"
    )]
    Stats(QueueOnly),
    /// Delete every message of a queue; asks for its name unless --yes.
    #[command(
        after_help = "Without --yes and without a terminal to ask on, purge refuses (exit 2).\n\nExamples:\n  veil queues purge orders          # type `orders` to confirm\n  veil queues purge orders --yes    # scripts"
    )]
    Purge(ConfirmedArgs),
    /// Create or update the queues a file declares (`[[queues]]`, as in the config file); deletes nothing.
    #[command(
        after_help = "The file is a config file, or any TOML file with [[queues]] tables (README.md \"Queues declared in the\nconfig file\"). Queues the file leaves out, and settings, tags and metadata an entry leaves out, are\nleft as they are. A file with one bad entry changes nothing.\n\nExamples:\n  veil queues apply veil.toml --dry-run   # what would change\n  veil queues apply veil.toml"
    )]
    Apply(ApplyArgs),
}

#[derive(Args, Debug)]
pub struct ApplyArgs {
    /// A TOML file with `[[queues]]` tables.
    file: std::path::PathBuf,
    /// Show what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// The `[[queues]]` of a TOML file; every other key (a whole config file's) is ignored.
#[derive(Debug, Deserialize)]
struct QueuesFile {
    #[serde(default)]
    queues: Vec<veil_admin::declare::QueueDeclaration>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// Only names starting with this.
    #[arg(long)]
    prefix: Option<String>,
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// A FIFO queue (ordered per message group, deduplicated).
    #[arg(long)]
    fifo: bool,
    /// Seconds a received message stays hidden.
    #[arg(long, value_name = "S")]
    visibility_timeout: Option<u64>,
    /// Seconds a new message waits before it can be received.
    #[arg(long, value_name = "S")]
    delay: Option<u64>,
    /// Seconds a message is kept (forever when not given).
    #[arg(long, value_name = "S")]
    retention: Option<u64>,
}

#[derive(Args, Debug)]
pub struct QueueOnly {
    /// `name` or `namespace/name`.
    queue: QueueArg,
}

/// A queue and whether to skip the typed confirmation (delete, purge).
#[derive(Args, Debug)]
pub struct ConfirmedArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// Do not ask: act at once.
    #[arg(long, short = 'y')]
    yes: bool,
}

pub fn run(context: &Context, command: QueuesCommand) -> Result<(), CliError> {
    match command {
        QueuesCommand::List(args) => list(context, args),
        QueuesCommand::Create(args) => create(context, args),
        QueuesCommand::Delete(args) => delete(context, args),
        QueuesCommand::Stats(args) => stats(context, &args.queue),
        QueuesCommand::Purge(args) => purge(context, args),
        QueuesCommand::Apply(args) => apply(context, args),
    }
}

/// One queue of the list, as `GET /queues` gives it.
#[derive(Debug, Deserialize)]
pub struct Summary {
    pub namespace: String,
    pub name: String,
    pub fifo: bool,
    pub created_by: Option<String>,
    pub visible: u64,
    pub inflight: u64,
    pub delayed: u64,
    pub stored_bytes: u64,
    pub oldest_age_ms: u64,
    /// Running totals (`veil top` makes rates of them); 0 from a server that does not list them.
    #[serde(default)]
    pub sent: u64,
    #[serde(default)]
    pub received: u64,
    #[serde(default)]
    pub deleted: u64,
}

#[derive(Debug, Deserialize)]
pub struct SummaryList {
    pub queues: Vec<Summary>,
}

pub fn fetch_list(
    context: &Context,
    namespace: Option<String>,
    prefix: Option<String>,
) -> Result<Value, CliError> {
    let mut query = Vec::new();
    if let Some(namespace) = namespace {
        query.push(("namespace", namespace));
    }
    if let Some(prefix) = prefix {
        query.push(("prefix", prefix));
    }
    context.client.get("/queues", &query)
}

fn list(context: &Context, args: ListArgs) -> Result<(), CliError> {
    let answer = fetch_list(context, args.namespace, args.prefix)?;
    context.output.print(&answer, || {
        Ok(summary_table(&typed::<SummaryList>(&answer)?.queues))
    })
}

/// The queue table `queues list` and `top` share.
pub fn summary_table(queues: &[Summary]) -> String {
    let mut table = Table::new(&[
        "NAMESPACE",
        "NAME",
        "CREATED_BY",
        "VISIBLE",
        "IN-FLIGHT",
        "DELAYED",
        "OLDEST",
        "BYTES",
    ]);
    for q in queues {
        table.row(vec![
            q.namespace.clone(),
            queue_cell(&q.name, q.fifo),
            or_dash(q.created_by.as_deref()),
            q.visible.to_string(),
            q.inflight.to_string(),
            q.delayed.to_string(),
            age(q.oldest_age_ms),
            bytes(q.stored_bytes),
        ]);
    }
    table.render()
}

fn create(context: &Context, args: CreateArgs) -> Result<(), CliError> {
    let body = json!({
        "namespace": args.queue.namespace,
        "name": args.queue.name,
        "fifo": args.fifo,
        "settings": {
            "visibility_timeout_s": args.visibility_timeout,
            "delay_s": args.delay,
            "retention_s": args.retention,
        },
    });
    let answer = context.client.post("/queues", &body)?;
    context
        .output
        .print(&answer, || Ok(format!("created {}", args.queue)))
}

fn delete(context: &Context, args: ConfirmedArgs) -> Result<(), CliError> {
    let queue = &args.queue;
    if !args.yes {
        let typed = ask_confirmation(queue, "deletes the queue and every message in it")?;
        if typed != queue.name {
            return Err(CliError::Usage(format!(
                "{typed:?} is not the queue's name ({}): nothing deleted",
                queue.name
            )));
        }
    }
    let answer = context.client.delete(&queue_path(queue, ""))?;
    context
        .output
        .print(&answer, || Ok(format!("deleted {queue}")))
}

/// What `stats` shows of `GET /queues/{ns}/{q}`.
#[derive(Debug, Deserialize)]
struct Detail {
    queue: Summary,
    settings: Settings,
    dead_letter: Option<DeadLetter>,
    dead_letter_sources: Vec<Ref>,
    totals: Totals,
}

#[derive(Debug, Deserialize)]
struct Settings {
    visibility_timeout_s: Option<u64>,
    delay_s: Option<u64>,
    retention_s: Option<u64>,
    message_size_bytes_max: Option<u32>,
    receive_wait_s: Option<u64>,
    inflight_max: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct DeadLetter {
    dead_letter_queue: Ref,
    max_receive_count: u32,
}

#[derive(Debug, Deserialize)]
pub struct Ref {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Deserialize)]
struct Totals {
    sent: u64,
    received: u64,
    redelivered: u64,
    deleted: u64,
    purged: u64,
    expired: u64,
    dead_lettered: u64,
    moved_out: u64,
}

fn stats(context: &Context, queue: &QueueArg) -> Result<(), CliError> {
    let answer = context.client.get(&queue_path(queue, ""), &[])?;
    context
        .output
        .print(&answer, || Ok(stats_text(&typed::<Detail>(&answer)?)))
}

fn stats_text(detail: &Detail) -> String {
    let q = &detail.queue;
    let s = &detail.settings;
    let t = &detail.totals;
    let opt = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    let dead_letter = detail.dead_letter.as_ref().map_or("-".to_owned(), |d| {
        format!(
            "{} after {} receives",
            d.dead_letter_queue, d.max_receive_count
        )
    });
    let sources = detail
        .dead_letter_sources
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    pairs(&[
        ("queue", format!("{}/{}", q.namespace, q.name)),
        ("fifo", q.fifo.to_string()),
        ("created by", or_dash(q.created_by.as_deref())),
        ("visible", q.visible.to_string()),
        ("in-flight", q.inflight.to_string()),
        ("delayed", q.delayed.to_string()),
        ("oldest", age(q.oldest_age_ms)),
        ("bytes", bytes(q.stored_bytes)),
        ("visibility timeout s", opt(s.visibility_timeout_s)),
        ("delay s", opt(s.delay_s)),
        (
            "retention s",
            s.retention_s
                .map_or("forever".to_owned(), |v| v.to_string()),
        ),
        (
            "message size max",
            opt(s.message_size_bytes_max.map(u64::from)),
        ),
        ("receive wait s", opt(s.receive_wait_s)),
        ("in-flight max", opt(s.inflight_max.map(u64::from))),
        ("dead-letter queue", dead_letter),
        (
            "dead-letter sources",
            if sources.is_empty() {
                "-".to_owned()
            } else {
                sources
            },
        ),
        ("sent", t.sent.to_string()),
        ("received", t.received.to_string()),
        ("redelivered", t.redelivered.to_string()),
        ("deleted", t.deleted.to_string()),
        ("purged", t.purged.to_string()),
        ("expired", t.expired.to_string()),
        ("dead-lettered", t.dead_lettered.to_string()),
        ("moved out", t.moved_out.to_string()),
    ])
}

fn purge(context: &Context, args: ConfirmedArgs) -> Result<(), CliError> {
    let confirm = if args.yes {
        args.queue.name.clone()
    } else {
        ask_confirmation(&args.queue, "deletes every message of the queue")?
    };
    let answer = context.client.post(
        &queue_path(&args.queue, "/purge"),
        &json!({ "confirm": confirm }),
    )?;
    context.output.print(&answer, || {
        let purged = answer.get("purged").and_then(Value::as_u64).unwrap_or(0);
        Ok(format!("purged {purged} messages from {}", args.queue))
    })
}

fn apply(context: &Context, args: ApplyArgs) -> Result<(), CliError> {
    let path = args.file.display();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|error| CliError::Usage(format!("{path}: {error}")))?;
    let file: QueuesFile =
        toml::from_str(&text).map_err(|error| CliError::Usage(format!("{path}: {error}")))?;
    if file.queues.is_empty() {
        return Err(CliError::Usage(format!("{path} declares no [[queues]]")));
    }
    let answer = context.client.post(
        "/queues/apply",
        &json!({ "queues": file.queues, "dry_run": args.dry_run }),
    )?;
    context.output.print(&answer, || {
        let mut table = Table::new(&["QUEUE", "ACTION", "CHANGES"]);
        for change in answer["changes"].as_array().into_iter().flatten() {
            let details: Vec<&str> = change["details"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let action = change["action"].as_str().unwrap_or("?");
            table.row(vec![
                change["queue"].as_str().unwrap_or("?").to_owned(),
                if args.dry_run && action != "unchanged" {
                    format!("would {action}")
                } else {
                    action.to_owned()
                },
                if details.is_empty() {
                    "-".to_owned()
                } else {
                    details.join("; ")
                },
            ]);
        }
        Ok(table.render())
    })
}

/// Asks for the queue's name on the terminal and returns what was typed; `what` says what the command
/// destroys ("deletes every message of the queue").
fn ask_confirmation(queue: &QueueArg, what: &str) -> Result<String, CliError> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(CliError::Usage(format!(
            "this {what} ({queue}): confirm with --yes (no terminal to ask on)"
        )));
    }
    let mut stderr = std::io::stderr();
    write!(
        stderr,
        "This {what} ({queue}). Type the queue's name ({}) to confirm: ",
        queue.name
    )?;
    stderr.flush()?;
    let mut typed = String::new();
    stdin.lock().read_line(&mut typed)?;
    Ok(typed.trim().to_owned())
}
