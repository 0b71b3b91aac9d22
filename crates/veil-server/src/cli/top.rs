//! `veil top`: every queue's counts in one table, redrawn in place every `--interval` seconds (like
//! kubemqctl's dashboard). On a terminal each frame overwrites the last; into a pipe frames follow one
//! another, so `--iterations N` makes it a finite, scriptable snapshot.

use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use super::client::typed;
use super::output::{pretty, timestamp};
use super::queues::{fetch_list, summary_table, SummaryList};
use super::{CliError, Context};

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  veil top\n  veil top --interval 5 --namespace team-a\n  veil top --iterations 1            # one frame, then exit (scripts)"
)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, value_name = "S", default_value = "2", value_parser = parse_interval)]
    interval: Duration,
    /// Stop after this many frames (runs until Ctrl-C when not given).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
    /// Only this namespace.
    #[arg(long)]
    namespace: Option<String>,
}

/// Seconds, fractions allowed, at least 0.1 (a tighter loop only loads the server).
fn parse_interval(value: &str) -> Result<Duration, String> {
    let seconds: f64 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number of seconds"))?;
    if !(0.1..=3600.0).contains(&seconds) {
        return Err("the interval is between 0.1 and 3600 seconds".into());
    }
    Ok(Duration::from_secs_f64(seconds))
}

pub fn run(context: &Context, args: TopArgs) -> Result<(), CliError> {
    let in_place = std::io::stdout().is_terminal() && !context.output.is_json();
    let mut frame = 0u64;
    loop {
        frame += 1;
        let answer = fetch_list(context, args.namespace.clone(), None)?;
        let text = if context.output.is_json() {
            pretty(&answer)?
        } else {
            render(context, &typed::<SummaryList>(&answer)?, &args)
        };
        draw(&text, in_place, frame == 1)?;
        if args.iterations.is_some_and(|n| frame >= n) {
            return Ok(());
        }
        std::thread::sleep(args.interval);
    }
}

fn render(context: &Context, list: &SummaryList, args: &TopArgs) -> String {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let visible: u64 = list.queues.iter().map(|q| q.visible).sum();
    let inflight: u64 = list.queues.iter().map(|q| q.inflight).sum();
    format!(
        "veil top  {}  {}  every {:.1}s  {} queues, {visible} visible, {inflight} in flight\n\n{}",
        context.client.endpoint(),
        timestamp(now_ms),
        args.interval.as_secs_f64(),
        list.queues.len(),
        summary_table(&list.queues)
    )
}

/// In place: home the cursor, overwrite each line and clear what the last, longer frame left below.
fn draw(text: &str, in_place: bool, first: bool) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    if in_place {
        if first {
            write!(stdout, "\x1b[2J")?;
        }
        write!(stdout, "\x1b[H")?;
        for line in text.lines() {
            writeln!(stdout, "{line}\x1b[K")?;
        }
        write!(stdout, "\x1b[J")?;
    } else {
        if !first {
            writeln!(stdout)?;
        }
        writeln!(stdout, "{text}")?;
    }
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_takes_fractions_within_bounds() {
        assert_eq!(parse_interval("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("x").is_err());
    }
}
