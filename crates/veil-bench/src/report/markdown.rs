//! The markdown of `veil-bench report`: what each scenario's table shows and in which unit, each system's
//! median (min–max) and ratio to Veil per invocation, and the plain-text summary `suite` prints at its end.

use std::fmt::Write as _;

use crate::results::{ScenarioResult, ScenarioRun, SuiteResults, SCENARIOS};
use crate::stats::{human_us, median};

/// How a figure is shown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Unit {
    /// Per second.
    Rate,
    Micros,
    /// Microseconds with one decimal (CPU time per message).
    MicrosFine,
    Bytes,
    Seconds,
    /// A plain ratio (×).
    Ratio,
    Percent,
    Count,
}

pub(super) fn format_value(value: f64, unit: Unit) -> String {
    match unit {
        Unit::Rate => format!("{}/s", group(value)),
        Unit::Micros => human_us(value),
        Unit::MicrosFine => format!("{value:.1}µs"),
        Unit::Bytes => format!("{value:.0} B"),
        Unit::Seconds => format!("{value:.2} s"),
        Unit::Ratio => format!("{value:.2}×"),
        Unit::Percent => format!("{value:.1}%"),
        Unit::Count => group(value),
    }
}

/// `1234567.8` → `1,234,568`.
fn group(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// A column of a scenario's table: metric key, header, unit.
struct Column {
    key: &'static str,
    header: &'static str,
    unit: Unit,
}

const fn col(key: &'static str, header: &'static str, unit: Unit) -> Column {
    Column { key, header, unit }
}

/// What each scenario's table shows; the first column is the headline that the "× Veil" ratio is of.
fn columns(scenario: &str) -> (&'static str, &'static str, Vec<Column>) {
    use Unit::*;
    match scenario {
        "round-trip" => (
            "Round trip",
            "1 producer, 1 consumer, unbatched, 256 B, in lockstep: a message is sent, received once its send was \
             acknowledged, and deleted before the next is sent, so each figure is one request's service time \
             without queueing. End to end = send request start → receipt.",
            vec![
                col("e2e_p50_us", "end-to-end p50", Micros),
                col("e2e_p99_us", "end-to-end p99", Micros),
                col("send_p50_us", "send p50", Micros),
                col("receive_p50_us", "receive p50", Micros),
                col("delete_p50_us", "delete p50", Micros),
                col("delete_p99_us", "delete p99", Micros),
            ],
        ),
        "throughput" => (
            "Throughput",
            "Batches of 10, 1 KiB bodies, N producers and N consumers, deletes on: distinct messages received per \
             second from the start to the last first delivery (end to end, including the drain). Server CPU per \
             message = the server process's user + system CPU time over the run (all threads, from /proc/PID/stat) \
             divided by the distinct messages received, each of which was also sent and deleted: work per message, \
             which depends far less than a rate on the machine's speed (contention still raises it). \"–\" where the suite was not given the server's \
             PID (`--peer-pid`).",
            vec![
                col("msgs_per_s", "messages/s end to end", Rate),
                col("sent_per_s", "sent/s", Rate),
                col("e2e_p50_us", "end-to-end p50", Micros),
                col("e2e_p99_us", "end-to-end p99", Micros),
                col("cpu_us_per_msg", "server CPU/message", MicrosFine),
            ],
        ),
        "half-load" => (
            "Half load",
            "The throughput workload with its send rate limited to half of the same system's median throughput; \
             consumers short-poll (1 ms pause after an empty receive) so that receive latency is the request's \
             service time at that load, not time parked in a long poll.",
            vec![
                col("receive_p99_us", "receive p99", Micros),
                col("receive_p50_us", "receive p50", Micros),
                col("offered_per_s", "offered", Rate),
                col("msgs_per_s", "achieved", Rate),
                col("e2e_p99_us", "end-to-end p99", Micros),
            ],
        ),
        "ceiling" => (
            "Ceiling",
            "Unbatched SendMessage requests/s from the same client and concurrency against Veil and against the \
             no-op server built into veil-bench (canned reply, nothing stored): what loopback HTTP allows here.",
            vec![
                col("send_req_per_s", "SendMessage/s", Rate),
                col("pct_of_noop", "% of no-op", Percent),
                col("send_p50_us", "send p50", Micros),
                col("send_p99_us", "send p99", Micros),
            ],
        ),
        "redelivery" => (
            "Redelivery lateness",
            "Messages received once with a 1 s visibility timeout and not deleted; a long-polling consumer \
             measures how late each comes back after its deadline (deadline = first receive's request start + 1 s, \
             so lateness is never understated).",
            vec![
                col("late_p50_us", "lateness p50", Micros),
                col("late_p99_us", "lateness p99", Micros),
                col("late_max_us", "lateness max", Micros),
                col("redelivered", "redelivered", Count),
            ],
        ),
        "wake-up" => (
            "Wake-up",
            "A consumer long-polls an empty queue; time from a send's response to the consumer's receipt.",
            vec![
                col("wake_p50_us", "wake-up p50", Micros),
                col("wake_p99_us", "wake-up p99", Micros),
                col("wake_max_us", "wake-up max", Micros),
            ],
        ),
        "scale" => (
            "Scale",
            "A large queue (preloaded through a relaxed Veil for speed, part of it hidden for an hour, then \
             restarted durable) against a small one loaded the same way: per-operation p50 \
             (1 producer + 1 consumer, unbatched, deletes on) and its ratio large/small; server RSS per stored \
             message (VmRSS minus that of the empty server, divided by the messages stored: live after loading, \
             and after a restart); restart = spawn → first successful request with the data in place; disk = the \
             data directory's allocated blocks after the restart divided by the bodies stored (1 KiB each), and \
             what is left once the queue is purged and the server restarted (start-up compacts a mostly free store).",
            vec![
                col("stored", "stored", Count),
                col("hidden", "hidden", Count),
                col("send_ratio", "send p50 large/small", Ratio),
                col("receive_ratio", "receive p50 large/small", Ratio),
                col("delete_ratio", "delete p50 large/small", Ratio),
                col("rss_per_msg_live_bytes", "RSS/message live", Bytes),
                col("rss_per_msg_restarted_bytes", "RSS/message after restart", Bytes),
                col("restart_s", "restart", Seconds),
                col("disk_per_body_byte", "disk / bodies", Ratio),
                col("disk_after_purge_mib", "disk after purge + restart, MiB", Count),
            ],
        ),
        "fifo" => (
            "FIFO queues",
            "The throughput workload (batches of 10, 1 KiB, N producers and N consumers, deletes on) with a fixed \
             number of messages per run, on three queues of the same Veil in turn each round: a standard queue, a \
             FIFO queue whose messages go round-robin to many groups, and a FIFO queue with one hot group (unique \
             deduplication ids). \"× standard\" is the median of each round's ratio to that round's standard \
             queue. A group delivers nothing while one of its messages is in flight, so one hot group delivers one \
             batch per receive-and-delete round trip, whatever the number of consumers: that is its ceiling.",
            vec![
                col("msgs_per_s", "received/s", Rate),
                col("sent_per_s", "sent/s", Rate),
                col("received_ratio", "received × standard", Ratio),
                col("sent_ratio", "sent × standard", Ratio),
                col("receive_p50_us", "receive p50", Micros),
                col("receive_p99_us", "receive p99", Micros),
                col("e2e_p50_us", "end-to-end p50", Micros),
            ],
        ),
        _ => ("Other", "", Vec::new()),
    }
}

/// Median, min and max of a metric over a scenario's successful runs.
pub(super) fn spread(runs: &[ScenarioRun], key: &str) -> Option<(f64, f64, f64)> {
    let values: Vec<f64> = runs
        .iter()
        .filter(|run| run.ok)
        .filter_map(|run| run.metrics.get(key).copied())
        .collect();
    let mid = median(&values)?;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((mid, min, max))
}

fn cell(runs: &[ScenarioRun], column: &Column) -> String {
    match spread(runs, column.key) {
        None => "–".into(),
        Some((mid, min, max)) if runs.iter().filter(|r| r.ok).count() > 1 => format!(
            "{} ({}–{})",
            format_value(mid, column.unit),
            format_value(min, column.unit),
            format_value(max, column.unit)
        ),
        Some((mid, _, _)) => format_value(mid, column.unit),
    }
}

/// One invocation's results of one scenario as a markdown table.
fn scenario_table(out: &mut String, suite: &SuiteResults, scenario: &str, label: Option<&str>) {
    let rows: Vec<&ScenarioResult> = suite
        .scenarios
        .iter()
        .filter(|s| s.scenario == scenario)
        .collect();
    if rows.is_empty() {
        return;
    }
    let (_, _, cols) = columns(scenario);
    let headline = &cols[0];
    let veil = rows
        .iter()
        .find(|r| r.system == "veil")
        .and_then(|r| spread(&r.runs, headline.key))
        .map(|(mid, _, _)| mid);
    // The FIFO table carries its own paired ratios to the standard queue (its "veil" row).
    let with_ratio = !matches!(scenario, "scale" | "fifo");
    if let Some(label) = label {
        let _ = writeln!(out, "*{label}*\n");
    }
    let mut header = String::from("| system | runs ok |");
    let mut rule = String::from("| --- | --- |");
    for column in &cols {
        let _ = write!(header, " {} |", column.header);
        rule.push_str(" ---: |");
    }
    if with_ratio {
        let _ = write!(header, " {} × Veil |", headline.header);
        rule.push_str(" ---: |");
    }
    let _ = writeln!(out, "{header}\n{rule}");
    let mut notes = Vec::new();
    for row in &rows {
        let ok = row.runs.iter().filter(|r| r.ok).count();
        let _ = write!(out, "| {} | {ok}/{} |", row.system, row.runs.len());
        for column in &cols {
            let _ = write!(out, " {} |", cell(&row.runs, column));
        }
        if with_ratio {
            let ratio = match (spread(&row.runs, headline.key), veil) {
                (Some((mid, _, _)), Some(veil)) if veil > 0.0 => format!("{:.3}", mid / veil),
                _ => "–".into(),
            };
            let _ = write!(out, " {ratio} |");
        }
        out.push('\n');
        for run in row.runs.iter().filter(|r| !r.ok) {
            notes.push(format!(
                "{}: a run failed: {}",
                row.system,
                run.error.as_deref().unwrap_or("no detail")
            ));
        }
    }
    out.push('\n');
    let mut durability: Vec<String> = rows
        .iter()
        .map(|r| format!("{}: {}", r.system, r.durability))
        .collect();
    durability.dedup();
    let _ = writeln!(out, "Storage: {}.\n", durability.join("; "));
    for note in notes {
        let _ = writeln!(out, "- ⚠ {note}");
    }
    if out.ends_with("\n- ") {
        out.push('\n');
    }
}

/// The generated markdown: per scenario, one table per invocation, and the chart links.
pub fn render_markdown(suites: &[SuiteResults], charts: &[(String, String)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "_Generated by `veil-bench report` from {} suite invocation(s); each cell is the median of the runs \
         with (min–max); \"× Veil\" divides a system's median by Veil's (durable) from the same invocation._\n",
        suites.len()
    );
    for suite in suites {
        let m = &suite.machine;
        let _ = writeln!(
            out,
            "- Invocation {}: `{}` — {} CPUs ({}), {:.1} GiB, Linux {}{}",
            suite.started_unix,
            suite.command,
            m.cpus,
            m.cpu_model,
            m.memory_gib,
            m.kernel,
            if suite.quick {
                " — **--quick: not meaningful figures**"
            } else {
                ""
            }
        );
    }
    out.push('\n');
    for &scenario in SCENARIOS {
        if !suites
            .iter()
            .any(|s| s.scenarios.iter().any(|r| r.scenario == scenario))
        {
            continue;
        }
        let (title, what, _) = columns(scenario);
        let _ = writeln!(out, "### {title}\n\n{what}\n");
        for suite in suites {
            let label = (suites.len() > 1).then(|| format!("invocation {}", suite.started_unix));
            scenario_table(&mut out, suite, scenario, label.as_deref());
        }
        for (chart_scenario, link) in charts {
            if chart_scenario == scenario {
                let _ = writeln!(out, "![{title}]({link})\n");
            }
        }
    }
    out
}

/// A plain-text summary of one invocation's medians, printed at the end of `suite`.
pub fn text_summary(suite: &SuiteResults) -> String {
    let mut out = String::from("== summary (median of runs)\n");
    for &scenario in SCENARIOS {
        let (title, _, cols) = columns(scenario);
        for row in suite.scenarios.iter().filter(|s| s.scenario == scenario) {
            let ok = row.runs.iter().filter(|r| r.ok).count();
            let figures: Vec<String> = cols
                .iter()
                .filter_map(|c| {
                    spread(&row.runs, c.key)
                        .map(|(mid, _, _)| format!("{} {}", c.header, format_value(mid, c.unit)))
                })
                .collect();
            let _ = writeln!(
                out,
                "{title:<20} {:<22} {ok}/{} ok  {}",
                row.system,
                row.runs.len(),
                figures.join(" · ")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::results::Machine;

    fn run(ok: bool, pairs: &[(&str, f64)]) -> ScenarioRun {
        ScenarioRun {
            ok,
            error: (!ok).then(|| "boom".to_owned()),
            metrics: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>(),
            ..ScenarioRun::default()
        }
    }

    /// Asserts that the rendered `markdown` contains `text`, printing the page when it does not.
    #[track_caller]
    fn assert_shows(markdown: &str, text: &str) {
        assert!(markdown.contains(text), "{markdown}");
    }

    fn suite() -> SuiteResults {
        SuiteResults {
            version: 1,
            started_unix: 1_700_000_000,
            command: "veil-bench suite".into(),
            machine: Machine::default(),
            quick: false,
            runs: 3,
            scenarios: vec![
                ScenarioResult {
                    scenario: "throughput".into(),
                    system: "veil".into(),
                    durability: "durable".into(),
                    runs: vec![
                        run(
                            true,
                            &[("msgs_per_s", 100_000.0), ("cpu_us_per_msg", 52.25)],
                        ),
                        run(true, &[("msgs_per_s", 120_000.0), ("cpu_us_per_msg", 48.0)]),
                        run(true, &[("msgs_per_s", 90_000.0), ("cpu_us_per_msg", 61.5)]),
                    ],
                },
                ScenarioResult {
                    scenario: "throughput".into(),
                    system: "moto".into(),
                    durability: "in memory".into(),
                    runs: vec![
                        run(true, &[("msgs_per_s", 500.0)]),
                        run(false, &[("msgs_per_s", 1.0)]),
                    ],
                },
            ],
        }
    }

    #[test]
    fn table_has_medians_ranges_and_ratios() {
        let markdown = render_markdown(
            &[suite()],
            &[("throughput".into(), "bench/throughput.png".into())],
        );
        assert_shows(&markdown, "### Throughput");
        assert_shows(&markdown, "| veil | 3/3 | 100,000/s (90,000/s–120,000/s) |");
        assert_shows(&markdown, "| 1.000 |");
        assert_shows(&markdown, "| server CPU/message |");
        assert_shows(&markdown, "| 52.2µs (48.0µs–61.5µs) | 1.000 |");
        // moto: one good run (500/s, no range shown), ratio 500 / 100,000; no PID given, so no CPU figure.
        assert_shows(&markdown, "| moto | 1/2 | 500/s |");
        assert_shows(&markdown, "| – | 0.005 |");
        assert_shows(&markdown, "⚠ moto: a run failed: boom");
        assert_shows(&markdown, "![Throughput](bench/throughput.png)");
        assert!(!markdown.contains("### Round trip"), "{markdown}");
    }

    #[test]
    fn fifo_table_shows_paired_ratios_instead_of_the_veil_ratio() {
        let row = |system: &str, received: f64, ratio: f64| ScenarioResult {
            scenario: "fifo".into(),
            system: system.into(),
            durability: "durable".into(),
            runs: vec![run(
                true,
                &[("msgs_per_s", received), ("received_ratio", ratio)],
            )],
        };
        let suite = SuiteResults {
            scenarios: vec![
                row("veil", 20_000.0, 1.0),
                row("veil fifo, 1 group", 5_000.0, 0.25),
            ],
            ..suite()
        };
        let markdown = render_markdown(&[suite], &[]);
        assert_shows(&markdown, "### FIFO queues");
        assert_shows(&markdown, "| received/s | sent/s | received × standard |");
        assert_shows(
            &markdown,
            "| veil fifo, 1 group | 1/1 | 5,000/s | – | 0.25× |",
        );
        assert!(!markdown.contains("× Veil |"), "{markdown}");
    }

    #[test]
    fn value_formatting() {
        assert_eq!(group(1_234_567.4), "1,234,567");
        assert_eq!(group(999.0), "999");
        assert_eq!(format_value(1_500.0, Unit::Micros), "1.50ms");
        assert_eq!(format_value(0.5, Unit::Ratio), "0.50×");
        assert_eq!(format_value(57.25, Unit::Percent), "57.2%");
    }
}
