//! `veil-bench report`: turns the suite's JSON into the markdown tables of docs/benchmarks.md (per scenario:
//! each system's median over the runs, min–max, and the ratio to Veil from the same invocation) and PNG
//! charts drawn with plotters. The generated part sits between `<!-- results:begin -->` and
//! `<!-- results:end -->`, so the hand-written prose around it survives regeneration.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::BenchError;
use crate::results::{ScenarioResult, ScenarioRun, SuiteResults, SCENARIOS};
use crate::stats::{human_us, median};

pub const BEGIN_MARKER: &str = "<!-- results:begin -->";
pub const END_MARKER: &str = "<!-- results:end -->";
/// A TTF from Debian's fonts-dejavu-core, read at run time; without it charts are drawn without text.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A results directory (every suite-*.json in it) or one results file.
    #[arg(long, default_value = "bench/results")]
    results: PathBuf,
    /// The markdown page; its section between the results markers is replaced (created if absent).
    #[arg(long, default_value = "docs/benchmarks.md")]
    out: PathBuf,
    /// Directory for the PNG charts, linked from the page by a path relative to it.
    #[arg(long, default_value = "docs/bench")]
    charts: PathBuf,
}

/// How a figure is shown.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
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

fn format_value(value: f64, unit: Unit) -> String {
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
fn spread(runs: &[ScenarioRun], key: &str) -> Option<(f64, f64, f64)> {
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

/// Replaces the generated section of `page` (between the markers), appending one when there is none.
pub fn splice(page: &str, section: &str) -> String {
    let generated = format!("{BEGIN_MARKER}\n{section}{END_MARKER}");
    match (page.find(BEGIN_MARKER), page.find(END_MARKER)) {
        (Some(begin), Some(end)) if end > begin => {
            format!(
                "{}{generated}{}",
                &page[..begin],
                &page[end + END_MARKER.len()..]
            )
        }
        _ => {
            let mut out = page.to_owned();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&generated);
            out.push('\n');
            out
        }
    }
}

fn load(results: &Path) -> Result<Vec<SuiteResults>, BenchError> {
    let mut files = Vec::new();
    if results.is_dir() {
        for entry in std::fs::read_dir(results)
            .map_err(BenchError::io("reading the results directory", results))?
        {
            let path = entry
                .map_err(BenchError::io("reading the results directory", results))?
                .path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("suite-") && name.ends_with(".json") {
                files.push(path);
            }
        }
    } else {
        files.push(results.to_owned());
    }
    let mut suites = Vec::new();
    for path in files {
        let text =
            std::fs::read_to_string(&path).map_err(BenchError::io("reading results", &path))?;
        let suite: SuiteResults =
            serde_json::from_str(&text).map_err(|source| BenchError::Json {
                context: "parsing results",
                path: path.clone(),
                source,
            })?;
        suites.push(suite);
    }
    if suites.is_empty() {
        return Err(BenchError::Usage(format!(
            "no suite-*.json results in {} (run `veil-bench suite` first)",
            results.display()
        )));
    }
    suites.sort_by_key(|s| s.started_unix);
    Ok(suites)
}

/// Registers a sans-serif font for plotters; false when none is installed (charts then carry no text).
fn register_font() -> bool {
    for path in FONT_PATHS {
        if let Ok(bytes) = std::fs::read(path) {
            // plotters keeps fonts for the life of the process; one small leak per report.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

const COLORS: &[RGBColor] = &[
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

fn chart_error(path: &Path) -> impl Fn(String) -> BenchError + '_ {
    move |message| BenchError::Chart {
        path: path.to_owned(),
        message,
    }
}

/// A bar chart of one figure per system.
fn bar_chart(
    path: &Path,
    title: &str,
    unit: Unit,
    bars: &[(String, f64)],
    text: bool,
) -> Result<(), BenchError> {
    let fail = chart_error(path);
    let root = BitMapBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let top = bars.iter().map(|(_, v)| *v).fold(0.0, f64::max).max(1.0) * 1.15;
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(90);
    if text {
        builder.caption(title, ("sans-serif", 24));
    }
    let mut chart = builder
        .build_cartesian_2d(
            (0..bars.len().saturating_sub(1)).into_segmented(),
            0f64..top,
        )
        .map_err(|e| fail(e.to_string()))?;
    let names: Vec<String> = bars.iter().map(|(name, _)| name.clone()).collect();
    let formatter = |x: &SegmentValue<usize>| match x {
        SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    let y_formatter = |y: &f64| format_value(*y, unit);
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .x_label_formatter(&formatter)
        .y_label_formatter(&y_formatter);
    if !text {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| fail(e.to_string()))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, value))| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), *value),
                ],
                COLORS[i % COLORS.len()].filled(),
            );
            bar.set_margin(0, 0, 25, 25);
            bar
        }))
        .map_err(|e| fail(e.to_string()))?;
    if text {
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, value))| {
                Text::new(
                    format_value(*value, unit),
                    (SegmentValue::CenterOf(i), *value + top * 0.02),
                    ("sans-serif", 16)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            }))
            .map_err(|e| fail(e.to_string()))?;
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// Latency CDFs (log x axis in µs), one line per system.
fn cdf_chart(
    path: &Path,
    title: &str,
    series: &[(String, Vec<[f64; 2]>)],
    text: bool,
) -> Result<(), BenchError> {
    let fail = chart_error(path);
    let root = BitMapBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let points = series.iter().flat_map(|(_, points)| points.iter());
    let low = points
        .clone()
        .map(|p| p[0])
        .fold(f64::INFINITY, f64::min)
        .max(1.0);
    let high = points.map(|p| p[0]).fold(0.0, f64::max).max(low * 10.0);
    let mut builder = ChartBuilder::on(&root);
    builder
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60);
    if text {
        builder.caption(title, ("sans-serif", 24));
    }
    let mut chart = builder
        .build_cartesian_2d((low * 0.8..high * 1.25).log_scale(), 0f64..1.0)
        .map_err(|e| fail(e.to_string()))?;
    let x_formatter = |x: &f64| human_us(*x);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(8)
        .x_label_formatter(&x_formatter)
        .y_desc("fraction of messages")
        .x_desc("latency (log scale)");
    if !text {
        mesh.x_labels(0).y_labels(0).x_desc("").y_desc("");
    }
    mesh.draw().map_err(|e| fail(e.to_string()))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line = chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p[0].max(low), p[1])),
                color.stroke_width(2),
            ))
            .map_err(|e| fail(e.to_string()))?;
        if text {
            line.label(name.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()
            .map_err(|e| fail(e.to_string()))?;
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// The CDF of the run whose headline figure is the median one.
fn median_run_cdf(runs: &[ScenarioRun], key: &str) -> Option<Vec<[f64; 2]>> {
    let mut ok: Vec<&ScenarioRun> = runs
        .iter()
        .filter(|r| r.ok && !r.cdf_us.is_empty() && r.metrics.contains_key(key))
        .collect();
    ok.sort_by(|a, b| a.metrics[key].total_cmp(&b.metrics[key]));
    ok.get(ok.len() / 2).map(|run| run.cdf_us.clone())
}

/// For charts: each system's results of `scenario` from the newest invocation that has them (so peers
/// measured by a separate invocation still share Veil's chart), Veil first.
fn latest_rows<'a>(suites: &'a [SuiteResults], scenario: &str) -> Vec<&'a ScenarioResult> {
    let mut rows: Vec<&ScenarioResult> = Vec::new();
    for suite in suites.iter().rev() {
        for row in suite.scenarios.iter().filter(|r| r.scenario == scenario) {
            if !rows.iter().any(|seen| seen.system == row.system) {
                rows.push(row);
            }
        }
    }
    rows.sort_by_key(|row| (!row.system.starts_with("veil"), row.system.clone()));
    rows
}

/// Draws the charts; returns (scenario, link relative to the page) pairs.
fn draw_charts(
    suites: &[SuiteResults],
    charts: &Path,
    page: &Path,
) -> Result<Vec<(String, String)>, BenchError> {
    std::fs::create_dir_all(charts)
        .map_err(BenchError::io("creating the charts directory", charts))?;
    let text = register_font();
    if !text {
        eprintln!(
            "veil-bench: no TTF font found ({}); charts have no labels",
            FONT_PATHS.join(", ")
        );
    }
    let link_base = relative_link(page, charts);
    let mut links = Vec::new();
    let bars_of = |scenario: &str, key: &str| -> Vec<(String, f64)> {
        latest_rows(suites, scenario)
            .into_iter()
            .filter_map(|s| spread(&s.runs, key).map(|(mid, _, _)| (s.system.clone(), mid)))
            .collect()
    };
    for (scenario, key, file, title) in [
        (
            "throughput",
            "msgs_per_s",
            "throughput.png",
            "Throughput: messages/s end to end (batches of 10, 1 KiB)",
        ),
        (
            "ceiling",
            "send_req_per_s",
            "ceiling.png",
            "Unbatched SendMessage requests/s",
        ),
        (
            "fifo",
            "msgs_per_s",
            "fifo.png",
            "Standard and FIFO queues: messages/s end to end",
        ),
    ] {
        let bars = bars_of(scenario, key);
        if !bars.is_empty() {
            bar_chart(&charts.join(file), title, Unit::Rate, &bars, text)?;
            links.push((scenario.to_owned(), format!("{link_base}{file}")));
        }
    }
    for (scenario, key, file, title) in [
        (
            "round-trip",
            "e2e_p50_us",
            "round-trip-cdf.png",
            "Round trip: end-to-end latency CDF",
        ),
        (
            "half-load",
            "receive_p99_us",
            "half-load-cdf.png",
            "Half load: receive latency CDF",
        ),
        (
            "redelivery",
            "late_p99_us",
            "redelivery-cdf.png",
            "Redelivery lateness CDF",
        ),
        (
            "wake-up",
            "wake_p99_us",
            "wake-up-cdf.png",
            "Wake-up latency CDF",
        ),
    ] {
        let series: Vec<(String, Vec<[f64; 2]>)> = latest_rows(suites, scenario)
            .into_iter()
            .filter_map(|s| median_run_cdf(&s.runs, key).map(|cdf| (s.system.clone(), cdf)))
            .collect();
        if !series.is_empty() {
            cdf_chart(&charts.join(file), title, &series, text)?;
            links.push((scenario.to_owned(), format!("{link_base}{file}")));
        }
    }
    Ok(links)
}

/// The charts directory as seen from the page's directory (`docs/bench` from `docs/benchmarks.md` →
/// `bench/`), falling back to the path as given.
fn relative_link(page: &Path, charts: &Path) -> String {
    let page_dir = page.parent().unwrap_or(Path::new(""));
    let relative = charts.strip_prefix(page_dir).unwrap_or(charts);
    let mut link = relative.to_string_lossy().into_owned();
    if !link.is_empty() && !link.ends_with('/') {
        link.push('/');
    }
    link
}

pub fn report(args: ReportArgs) -> Result<(), BenchError> {
    let suites = load(&args.results)?;
    let links = draw_charts(&suites, &args.charts, &args.out)?;
    let section = render_markdown(&suites, &links);
    let page = match std::fs::read_to_string(&args.out) {
        Ok(page) => page,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => "# Benchmarks\n".to_owned(),
        Err(error) => return Err(BenchError::io("reading the page", &args.out)(error)),
    };
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(BenchError::io("creating the page's directory", dir))?;
    }
    std::fs::write(&args.out, splice(&page, &section))
        .map_err(BenchError::io("writing the page", &args.out))?;
    println!(
        "wrote {} ({} invocation(s)) and {} chart(s) in {}",
        args.out.display(),
        suites.len(),
        links.len(),
        args.charts.display()
    );
    Ok(())
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

    /// A results file written before the CPU figure existed still loads, and its table shows "–" there.
    #[test]
    fn results_without_cpu_figures_still_load() {
        let old = r#"{"version": 1, "started_unix": 1700000000, "command": "veil-bench suite",
            "machine": {"cpus": 2, "cpu_model": "x", "memory_gib": 1.0, "kernel": "6"},
            "quick": false, "runs": 1, "scenarios": [{"scenario": "throughput", "system": "veil",
            "durability": "durable", "runs": [{"ok": true, "error": null,
            "metrics": {"msgs_per_s": 1000.0, "sent_per_s": 1500.0}, "cdf_us": [], "detail": null}]}]}"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("suite-1700000000.json");
        std::fs::write(&path, old).unwrap();
        let suites = load(dir.path()).unwrap();
        let markdown = render_markdown(&suites, &[]);
        assert_shows(
            &markdown,
            "| veil | 1/1 | 1,000/s | 1,500/s | – | – | – | 1.000 |",
        );
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
    fn splice_replaces_only_the_generated_section() {
        let page =
            format!("# B\n\nprose before\n\n{BEGIN_MARKER}\nold\n{END_MARKER}\n\nprose after\n");
        let spliced = splice(&page, "new\n");
        assert_eq!(
            spliced,
            format!("# B\n\nprose before\n\n{BEGIN_MARKER}\nnew\n{END_MARKER}\n\nprose after\n")
        );
        assert_eq!(splice(&spliced, "new\n"), spliced);
        let appended = splice("# B\nprose", "x\n");
        assert_eq!(
            appended,
            format!("# B\nprose\n\n{BEGIN_MARKER}\nx\n{END_MARKER}\n")
        );
    }

    #[test]
    fn value_formatting() {
        assert_eq!(group(1_234_567.4), "1,234,567");
        assert_eq!(group(999.0), "999");
        assert_eq!(format_value(1_500.0, Unit::Micros), "1.50ms");
        assert_eq!(format_value(0.5, Unit::Ratio), "0.50×");
        assert_eq!(format_value(57.25, Unit::Percent), "57.2%");
    }

    #[test]
    fn chart_links_are_relative_to_the_page() {
        assert_eq!(
            relative_link(Path::new("docs/benchmarks.md"), Path::new("docs/bench")),
            "bench/"
        );
        assert_eq!(
            relative_link(Path::new("page.md"), Path::new("charts")),
            "charts/"
        );
    }

    #[test]
    fn charts_render_to_png() {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = register_font();
        let bars = vec![("veil".to_owned(), 100_000.0), ("moto".to_owned(), 500.0)];
        bar_chart(
            &dir.path().join("bars.png"),
            "bars",
            Unit::Rate,
            &bars,
            text,
        )
        .expect("bar chart");
        let cdf = vec![[10.0, 0.0], [100.0, 0.5], [1_000.0, 0.99], [5_000.0, 1.0]];
        cdf_chart(
            &dir.path().join("cdf.png"),
            "cdf",
            &[("veil".to_owned(), cdf)],
            text,
        )
        .expect("cdf chart");
        for name in ["bars.png", "cdf.png"] {
            let bytes = std::fs::read(dir.path().join(name)).expect("chart written");
            assert!(bytes.starts_with(b"\x89PNG"), "{name} is a PNG");
        }
    }
}
