//! `veil redrive`: starts moving a dead-letter queue's messages back (each to the queue it came from, or all
//! to `--to`), optionally waits with a progress bar until the move ends; `--status` lists the queue's
//! redrives and `--cancel` stops one (what it moved stays moved).

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;
use serde_json::{json, Value};

use super::client::{queue_path, segment, typed};
use super::output::{or_dash, timestamp, Table};
use super::queues::Ref;
use super::{CliError, Context, QueueArg};

/// How often `--wait` asks for progress: the server steps move tasks every 100 ms.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  veil redrive orders-dlq --wait                 # back to where each message came from\n  veil redrive orders-dlq --to orders-retry --rate 50\n  veil redrive orders-dlq --status\n  veil redrive orders-dlq --cancel 2b7f0c1e-5d0a-4c61-8d7e-9b1f3a2c4d5e\n\nWith --wait the exit code is 1 when the redrive ends failed or cancelled."
)]
pub struct RedriveArgs {
    /// The dead-letter queue: `name` or `namespace/name`.
    dlq: QueueArg,
    /// Move every message to this queue instead of where each came from.
    #[arg(long, value_name = "QUEUE", conflicts_with_all = ["status", "cancel"])]
    to: Option<QueueArg>,
    /// At most this many messages per second.
    #[arg(long, value_name = "N", conflicts_with_all = ["status", "cancel"])]
    rate: Option<u32>,
    /// Wait, with a progress bar, until the redrive is no longer running.
    #[arg(long, conflicts_with_all = ["status", "cancel"])]
    wait: bool,
    /// List this queue's redrives (most recent first) instead of starting one.
    #[arg(long, conflicts_with = "cancel")]
    status: bool,
    /// Cancel this running redrive.
    #[arg(long, value_name = "TASK-ID")]
    cancel: Option<String>,
}

/// A redrive as the API gives it.
#[derive(Debug, Deserialize)]
struct Redrive {
    id: String,
    destination: Option<Ref>,
    rate_per_s_max: Option<u32>,
    started_at_ms: u64,
    to_move: u64,
    moved: u64,
    status: String,
    failure: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RedriveList {
    redrives: Vec<Redrive>,
}

pub fn run(context: &Context, args: RedriveArgs) -> Result<(), CliError> {
    if args.status {
        return status(context, &args.dlq);
    }
    if let Some(task) = &args.cancel {
        return cancel(context, &args.dlq, task);
    }
    start(context, args)
}

fn status(context: &Context, dlq: &QueueArg) -> Result<(), CliError> {
    let answer = context.client.get(&queue_path(dlq, "/redrive"), &[])?;
    context.output.print(&answer, || {
        Ok(table(&typed::<RedriveList>(&answer)?.redrives))
    })
}

fn cancel(context: &Context, dlq: &QueueArg, task: &str) -> Result<(), CliError> {
    let path = queue_path(dlq, &format!("/redrive/{}", segment(task)));
    let answer = context.client.delete(&path)?;
    context
        .output
        .print(&answer, || Ok(table(&[typed::<Redrive>(&answer)?])))
}

fn start(context: &Context, args: RedriveArgs) -> Result<(), CliError> {
    let to = args
        .to
        .as_ref()
        .map(|q| json!({ "namespace": q.namespace, "name": q.name }));
    let answer = context.client.post(
        &queue_path(&args.dlq, "/redrive"),
        &json!({ "to": to, "rate_per_s_max": args.rate }),
    )?;
    if !args.wait {
        return context
            .output
            .print(&answer, || Ok(table(&[typed::<Redrive>(&answer)?])));
    }
    let started: Redrive = typed(&answer)?;
    let (last, task) = wait(context, &args.dlq, &started)?;
    context
        .output
        .print(&last, || Ok(table(std::slice::from_ref(&task))))?;
    match task.status.as_str() {
        "completed" => Ok(()),
        other => Err(CliError::Failed(format!(
            "the redrive ended {other}{}",
            task.failure.map(|f| format!(": {f}")).unwrap_or_default()
        ))),
    }
}

/// Polls the queue's redrives until `started` is no longer running; returns its last JSON and shape.
fn wait(
    context: &Context,
    dlq: &QueueArg,
    started: &Redrive,
) -> Result<(Value, Redrive), CliError> {
    let bar = progress_bar(started.to_move, &format!("redriving {dlq}"));
    loop {
        let answer = context.client.get(&queue_path(dlq, "/redrive"), &[])?;
        let (value, task) = find_task(&answer, &started.id)?;
        bar.set_length(task.to_move);
        bar.set_position(task.moved);
        if task.status != "running" {
            bar.finish_and_clear();
            return Ok((value, task));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn find_task(answer: &Value, id: &str) -> Result<(Value, Redrive), CliError> {
    let tasks = answer
        .get("redrives")
        .and_then(Value::as_array)
        .ok_or_else(|| CliError::BadAnswer("no \"redrives\" in the redrive list".into()))?;
    let value = tasks
        .iter()
        .find(|t| t.get("id").and_then(Value::as_str) == Some(id))
        .ok_or_else(|| CliError::BadAnswer(format!("redrive {id} is no longer listed")))?;
    Ok((value.clone(), typed(value)?))
}

/// A bar on stderr, hidden when stderr is not a terminal (logs and pipes get no control characters).
pub fn progress_bar(length: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(length), draw_target());
    let style =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)")
            .map(|style| style.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(message.to_owned());
    bar
}

pub fn draw_target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

fn table(redrives: &[Redrive]) -> String {
    let mut table = Table::new(&[
        "ID",
        "STATUS",
        "MOVED",
        "TO_MOVE",
        "DESTINATION",
        "RATE",
        "STARTED",
        "FAILURE",
    ]);
    for r in redrives {
        table.row(vec![
            r.id.clone(),
            r.status.clone(),
            r.moved.to_string(),
            r.to_move.to_string(),
            r.destination
                .as_ref()
                .map_or("(origins)".to_owned(), ToString::to_string),
            r.rate_per_s_max
                .map_or("-".to_owned(), |n| format!("{n}/s")),
            timestamp(r.started_at_ms),
            or_dash(r.failure.as_deref()),
        ]);
    }
    table.render()
}
