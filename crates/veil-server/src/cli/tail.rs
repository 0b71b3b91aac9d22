//! `veil messages tail`: prints a queue's messages as they arrive, without receiving them (kubemqctl's
//! `queues attach`). It browses (`state=all`) from the seq after the newest stored message, every
//! `--interval`, so nothing is hidden, counted or changed; a message sent and deleted between two looks is
//! not seen. One line per message: a table row, or the message's JSON with `--output json` (JSON Lines).

use std::io::Write;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::client::{queue_path, typed};
use super::messages::{browse_page, View, ViewList};
use super::output::{body_cell, seconds_between, timestamp};
use super::{CliError, Context, QueueArg};

/// Messages asked for per look; a busier queue is read in several pages within one look.
const TAIL_PAGE: usize = 1000;
/// Table cells show this much of a body.
const BODY_CELL_CHARS: usize = 80;

#[derive(Args, Debug)]
#[command(
    after_help = "Tail browses: no message is received, hidden or counted.\n\nExamples:\n  veil messages tail orders\n  veil messages tail orders --from-start --count 10     # the first ten stored, then exit\n  veil --output json messages tail orders | jq -r .body"
)]
pub struct TailArgs {
    /// `name` or `namespace/name`.
    queue: QueueArg,
    /// Seconds between looks, fractions allowed (0.1 to 60).
    #[arg(long, value_name = "S", default_value = "0.5", value_parser = parse_interval)]
    interval: Duration,
    /// Start with the messages stored now, not only those sent from now on.
    #[arg(long)]
    from_start: bool,
    /// Exit after printing this many messages (runs until Ctrl-C when not given).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
}

fn parse_interval(value: &str) -> Result<Duration, String> {
    seconds_between(value, 0.1, 60.0)
}

pub fn run(context: &Context, args: TailArgs) -> Result<(), CliError> {
    let detail = context.client.get(&queue_path(&args.queue, ""), &[])?;
    let mut from_seq = match (args.from_start, detail["last_seq"].as_u64()) {
        (false, Some(last)) => last + 1,
        _ => 0,
    };
    let mut printed = 0u64;
    // On stderr in every output format (JSON goes to stdout alone): once it is printed, every message sent
    // from then on will be shown.
    eprintln!(
        "tailing {} (a browse: nothing is received); Ctrl-C to stop",
        args.queue
    );
    loop {
        loop {
            let answer = browse_page(context, &args.queue, from_seq, TAIL_PAGE)?;
            let raw = answer["messages"].as_array().map_or(&[][..], Vec::as_slice);
            let page: ViewList = typed(&answer)?;
            for (view, json) in page.messages.iter().zip(raw) {
                print_one(context, view, json)?;
                printed += 1;
                from_seq = view.seq + 1;
                if args.count.is_some_and(|n| printed >= n) {
                    return Ok(());
                }
            }
            if page.messages.len() < TAIL_PAGE {
                break;
            }
        }
        std::thread::sleep(args.interval);
    }
}

fn print_one(context: &Context, view: &View, json: &Value) -> Result<(), CliError> {
    let line = if context.output.is_json() {
        serde_json::to_string(json).map_err(|error| CliError::BadAnswer(error.to_string()))?
    } else {
        format!(
            "{}  seq {}  {}  {}  {}",
            timestamp(view.sent_at_ms),
            view.seq,
            view.id,
            view.state,
            body_cell(
                view.body.as_deref(),
                view.body_base64.len(),
                BODY_CELL_CHARS
            )
        )
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_bounded() {
        assert_eq!(parse_interval("0.2").unwrap(), Duration::from_millis(200));
        assert!(parse_interval("0.01").is_err());
        assert!(parse_interval("61").is_err());
    }
}
