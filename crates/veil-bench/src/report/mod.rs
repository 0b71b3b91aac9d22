//! `veil-bench report`: turns the suite's JSON into the markdown tables of docs/benchmarks.md (per scenario:
//! each system's median over the runs, min–max, and the ratio to Veil from the same invocation) and PNG
//! charts drawn with plotters. The generated part sits between `<!-- results:begin -->` and
//! `<!-- results:end -->`, so the hand-written prose around it survives regeneration. This file reads the
//! results and writes the page; markdown.rs renders the tables, charts.rs draws the charts.

mod charts;
mod markdown;

use std::path::{Path, PathBuf};

use crate::error::BenchError;
use crate::results::SuiteResults;

pub use self::markdown::{render_markdown, text_summary};

pub const BEGIN_MARKER: &str = "<!-- results:begin -->";
pub const END_MARKER: &str = "<!-- results:end -->";

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

pub fn report(args: ReportArgs) -> Result<(), BenchError> {
    let suites = load(&args.results)?;
    let links = charts::draw_charts(&suites, &args.charts, &args.out)?;
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
    use super::*;

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
        let row = "| veil | 1/1 | 1,000/s | 1,500/s | – | – | – | 1.000 |";
        assert!(markdown.contains(row), "{markdown}");
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
}
