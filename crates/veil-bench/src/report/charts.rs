//! The PNG charts of `veil-bench report`, drawn with plotters: bar charts of each system's median rate and
//! latency CDFs of its median run, from the newest invocation that measured it.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::markdown::{format_value, spread, Unit};
use crate::error::BenchError;
use crate::results::{ScenarioResult, ScenarioRun, SuiteResults};
use crate::stats::human_us;

/// A TTF from Debian's fonts-dejavu-core, read at run time; without it charts are drawn without text.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

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
pub(super) fn draw_charts(
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

#[cfg(test)]
mod tests {
    use super::*;

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
