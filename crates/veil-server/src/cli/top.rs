//! `veil top`: every queue's counts and rates in one table, redrawn in place every `--interval` seconds
//! (like kubemqctl's dashboard). The rates are the differences of the queues' running totals between two
//! frames over the time between them, so the first frame has none. On a terminal each frame overwrites the
//! last; into a pipe frames follow one another, so `--iterations N` makes it a finite, scriptable snapshot.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};

use super::client::typed;
use super::output::{age, bytes, pretty, queue_cell, seconds_between, timestamp, Table};
use super::queues::{fetch_list, Summary, SummaryList};
use super::{CliError, Context};

#[derive(Args, Debug)]
#[command(
    after_help = "SENT/S, RECV/S and DEL/S are per second over the last interval (`-` on the first frame).\n\nExamples:\n  veil top\n  veil top --interval 5 --namespace team-a --prefix orders\n  veil top --sort inflight            # the largest hidden backlog first\n  veil top --iterations 2 --interval 1   # two frames, the second with rates, then exit (scripts)"
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
    /// Only queues whose name starts with this.
    #[arg(long)]
    prefix: Option<String>,
    /// The column to order by: names ascending, numbers largest first.
    #[arg(long, value_enum, default_value_t = SortBy::Name)]
    sort: SortBy,
}

/// `--sort`'s columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortBy {
    Name,
    Visible,
    Inflight,
    Delayed,
    Oldest,
    Bytes,
    Sent,
    Received,
    Deleted,
}

/// A queue's totals at one frame, and when they were read: the next frame's rates start from here.
type Totals = HashMap<(String, String), [u64; 3]>;

/// Messages per second of one queue over the last interval: sent, received (deliveries), deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Rates([f64; 3]);

/// Seconds, fractions allowed, at least 0.1 (a tighter loop only loads the server).
fn parse_interval(value: &str) -> Result<Duration, String> {
    seconds_between(value, 0.1, 3600.0)
}

pub fn run(context: &Context, args: TopArgs) -> Result<(), CliError> {
    let in_place = std::io::stdout().is_terminal() && !context.output.is_json();
    let mut frame = 0u64;
    let mut previous: Option<(Instant, Totals)> = None;
    loop {
        frame += 1;
        let answer = fetch_list(context, args.namespace.clone(), args.prefix.clone())?;
        let read_at = Instant::now();
        let text = if context.output.is_json() {
            pretty(&answer)?
        } else {
            let list = typed::<SummaryList>(&answer)?;
            let rates = previous
                .as_ref()
                .map(|(at, totals)| rates(totals, &list.queues, read_at.duration_since(*at)));
            let text = render(context, &list, rates.as_ref(), &args);
            previous = Some((read_at, totals_of(&list.queues)));
            text
        };
        draw(&text, in_place, frame == 1)?;
        if args.iterations.is_some_and(|n| frame >= n) {
            return Ok(());
        }
        std::thread::sleep(args.interval);
    }
}

fn totals_of(queues: &[Summary]) -> Totals {
    queues
        .iter()
        .map(|q| {
            (
                (q.namespace.clone(), q.name.clone()),
                [q.sent, q.received, q.deleted],
            )
        })
        .collect()
}

/// Each queue's rates since `before`, `elapsed` ago; a queue that was not there then has none.
fn rates(
    before: &Totals,
    queues: &[Summary],
    elapsed: Duration,
) -> HashMap<(String, String), Rates> {
    let seconds = elapsed.as_secs_f64().max(1e-3);
    queues
        .iter()
        .filter_map(|q| {
            let key = (q.namespace.clone(), q.name.clone());
            let then = before.get(&key)?;
            let now = [q.sent, q.received, q.deleted];
            // A queue deleted and made again between frames starts over: its totals went down.
            let per_s = |i: usize| now[i].saturating_sub(then[i]) as f64 / seconds;
            Some((key, Rates([per_s(0), per_s(1), per_s(2)])))
        })
        .collect()
}

fn render(
    context: &Context,
    list: &SummaryList,
    rates: Option<&HashMap<(String, String), Rates>>,
    args: &TopArgs,
) -> String {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let visible: u64 = list.queues.iter().map(|q| q.visible).sum();
    let inflight: u64 = list.queues.iter().map(|q| q.inflight).sum();
    format!(
        "veil top  {}  {}  every {:.1}s  {} queues, {visible} visible, {inflight} in flight  (sorted by {:?})\n\n{}",
        context.client.endpoint(),
        timestamp(now_ms),
        args.interval.as_secs_f64(),
        list.queues.len(),
        args.sort,
        top_table(&list.queues, rates, args.sort)
    )
}

/// The queues in `sort` order, with their rates (`-` where there are none yet).
fn top_table(
    queues: &[Summary],
    rates: Option<&HashMap<(String, String), Rates>>,
    sort: SortBy,
) -> String {
    let rate_of =
        |q: &Summary| rates.and_then(|r| r.get(&(q.namespace.clone(), q.name.clone())).copied());
    let mut rows: Vec<(&Summary, Option<Rates>)> = queues.iter().map(|q| (q, rate_of(q))).collect();
    sort_rows(&mut rows, sort);
    let mut table = Table::new(&[
        "NAMESPACE",
        "NAME",
        "VISIBLE",
        "IN-FLIGHT",
        "DELAYED",
        "OLDEST",
        "BYTES",
        "SENT/S",
        "RECV/S",
        "DEL/S",
    ]);
    let cell =
        |rates: Option<Rates>, i: usize| rates.map_or("-".to_owned(), |r| format!("{:.1}", r.0[i]));
    for (q, r) in rows {
        table.row(vec![
            q.namespace.clone(),
            queue_cell(&q.name, q.fifo),
            q.visible.to_string(),
            q.inflight.to_string(),
            q.delayed.to_string(),
            age(q.oldest_age_ms),
            bytes(q.stored_bytes),
            cell(r, 0),
            cell(r, 1),
            cell(r, 2),
        ]);
    }
    table.render()
}

/// Names ascending; every number largest first, ties by name; a rate not known yet sorts last.
fn sort_rows(rows: &mut [(&Summary, Option<Rates>)], sort: SortBy) {
    let name = |q: &Summary| (q.namespace.clone(), q.name.clone());
    let count = |q: &Summary| match sort {
        SortBy::Name => 0,
        SortBy::Visible => q.visible,
        SortBy::Inflight => q.inflight,
        SortBy::Delayed => q.delayed,
        SortBy::Oldest => q.oldest_age_ms,
        SortBy::Bytes => q.stored_bytes,
        SortBy::Sent | SortBy::Received | SortBy::Deleted => 0,
    };
    let rate = |r: Option<Rates>| {
        let i = match sort {
            SortBy::Sent => 0,
            SortBy::Received => 1,
            _ => 2,
        };
        r.map_or(-1.0, |r| r.0[i])
    };
    rows.sort_by(|(a, ra), (b, rb)| {
        let by_value = match sort {
            SortBy::Name => std::cmp::Ordering::Equal,
            SortBy::Sent | SortBy::Received | SortBy::Deleted => rate(*rb).total_cmp(&rate(*ra)),
            _ => count(b).cmp(&count(a)),
        };
        by_value.then_with(|| name(a).cmp(&name(b)))
    });
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

    fn summary(name: &str, visible: u64, totals: [u64; 3]) -> Summary {
        Summary {
            namespace: "default".into(),
            name: name.into(),
            fifo: false,
            created_by: None,
            visible,
            inflight: 0,
            delayed: 0,
            stored_bytes: 0,
            oldest_age_ms: 0,
            sent: totals[0],
            received: totals[1],
            deleted: totals[2],
        }
    }

    #[test]
    fn rates_are_the_totals_difference_over_the_interval() {
        let before = totals_of(&[
            summary("a", 0, [100, 50, 40]),
            summary("gone", 0, [1, 1, 1]),
        ]);
        let now = [
            summary("a", 0, [300, 150, 40]),
            summary("new", 0, [9, 9, 9]),
        ];
        let rates = rates(&before, &now, Duration::from_secs(2));
        assert_eq!(
            rates[&("default".into(), "a".into())],
            Rates([100.0, 50.0, 0.0])
        );
        assert!(
            !rates.contains_key(&("default".into(), "new".into())),
            "no rate before a second frame"
        );
    }

    #[test]
    fn numbers_sort_largest_first_and_names_break_ties() {
        let queues = [
            summary("b", 5, [0; 3]),
            summary("a", 5, [0; 3]),
            summary("c", 9, [0; 3]),
        ];
        let mut rows: Vec<(&Summary, Option<Rates>)> = queues.iter().map(|q| (q, None)).collect();
        sort_rows(&mut rows, SortBy::Visible);
        let names: Vec<&str> = rows.iter().map(|(q, _)| q.name.as_str()).collect();
        assert_eq!(names, ["c", "a", "b"]);
        let mut rows: Vec<(&Summary, Option<Rates>)> = vec![
            (&queues[0], Some(Rates([1.0, 0.0, 0.0]))),
            (&queues[1], None),
            (&queues[2], Some(Rates([7.0, 0.0, 0.0]))),
        ];
        sort_rows(&mut rows, SortBy::Sent);
        let names: Vec<&str> = rows.iter().map(|(q, _)| q.name.as_str()).collect();
        assert_eq!(
            names,
            ["c", "b", "a"],
            "a queue without a rate yet comes last"
        );
    }

    #[test]
    fn the_interval_takes_fractions_within_bounds() {
        assert_eq!(parse_interval("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("x").is_err());
    }
}
