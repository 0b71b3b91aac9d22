//! How the CLI prints: `--output json` prints the API's JSON as it came (pretty, for jq); `--output table`
//! prints aligned columns for people. Also the small formatters tables share (ages, sizes, times, bodies).

use std::io::Write;

use serde_json::Value;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

use super::{CliError, OutputFormat};

/// Where and how a command prints its result (stdout).
pub struct Output {
    pub format: OutputFormat,
}

impl Output {
    pub fn new(format: OutputFormat) -> Self {
        Self { format }
    }

    pub fn is_json(&self) -> bool {
        self.format == OutputFormat::Json
    }

    /// The API's answer as JSON, or the table `table` makes of it.
    pub fn print(
        &self,
        answer: &Value,
        table: impl FnOnce() -> Result<String, CliError>,
    ) -> Result<(), CliError> {
        let text = match self.format {
            OutputFormat::Json => pretty(answer)?,
            OutputFormat::Table => table()?,
        };
        write_out(&text)
    }
}

/// A number of seconds, fractions allowed, within `min_s..=max_s` (the refresh intervals of `top` and
/// `messages tail`).
pub fn seconds_between(value: &str, min_s: f64, max_s: f64) -> Result<std::time::Duration, String> {
    let seconds: f64 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number of seconds"))?;
    if !(min_s..=max_s).contains(&seconds) {
        return Err(format!(
            "the interval is between {min_s} and {max_s} seconds"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

/// A queue's name as the tables show it: a FIFO queue's marked.
pub fn queue_cell(name: &str, fifo: bool) -> String {
    if fifo {
        format!("{name} (fifo)")
    } else {
        name.to_owned()
    }
}

pub fn pretty(value: &Value) -> Result<String, CliError> {
    serde_json::to_string_pretty(value).map_err(|error| CliError::BadAnswer(error.to_string()))
}

/// Writes `text` and a newline to stdout; a closed pipe comes back as an error the caller ends on.
pub fn write_out(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")?;
    stdout.flush()?;
    Ok(())
}

/// Aligned columns under a header; the last column is not padded, so long values (bodies, receipts) do not
/// drag trailing spaces.
#[derive(Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let widths = self.widths();
        let mut lines = Vec::with_capacity(self.rows.len() + 1);
        lines.push(line(&self.headers, &widths));
        lines.extend(self.rows.iter().map(|row| line(row, &widths)));
        lines.join("\n")
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                let width = cell.chars().count();
                match widths.get_mut(i) {
                    Some(w) => *w = (*w).max(width),
                    None => widths.push(width),
                }
            }
        }
        widths
    }
}

fn line(cells: &[String], widths: &[usize]) -> String {
    let last = cells.len().saturating_sub(1);
    let mut out = String::new();
    for (i, cell) in cells.iter().enumerate() {
        if i == last {
            out.push_str(cell);
        } else {
            let width = widths.get(i).copied().unwrap_or(0);
            out.push_str(&format!("{cell:<width$}  "));
        }
    }
    out.trim_end().to_owned()
}

/// Name/value lines, for one object (a queue's stats).
pub fn pairs(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `1h02m`, `3m05s`, `12s`, `0s`: an age at a glance.
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `512B`, `1.5KiB`, `3.0MiB`, `2.1GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// A time in ms since the epoch as `2026-11-30T19:35:07.123Z` (UTC). Past year 9999, where `time`'s calendar
/// ends, as the raw milliseconds: the server sends no such time but a table must still show something.
pub fn timestamp(ms: u64) -> String {
    const FORMAT: &[BorrowedFormatItem<'_>] =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    i128::from(ms)
        .checked_mul(1_000_000)
        .and_then(|nanos| OffsetDateTime::from_unix_timestamp_nanos(nanos).ok())
        .and_then(|at| at.format(FORMAT).ok())
        .unwrap_or_else(|| format!("{ms}ms"))
}

/// A body for a table cell: its text on one line, cut to `max` characters; `<N bytes binary>` otherwise.
pub fn body_cell(text: Option<&str>, base64_len: usize, max: usize) -> String {
    match text {
        Some(text) => {
            let flat: String = text
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            if flat.chars().count() > max {
                let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
                format!("{cut}…")
            } else {
                flat
            }
        }
        None => format!("<{} bytes binary>", base64_len / 4 * 3),
    }
}

pub fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_and_the_last_is_not_padded() {
        let mut table = Table::new(&["NAME", "VISIBLE", "BODY"]);
        table.row(vec!["a".into(), "12345".into(), "x".into()]);
        table.row(vec!["longer-name".into(), "1".into(), "".into()]);
        assert_eq!(
            table.render(),
            "NAME         VISIBLE  BODY\n\
             a            12345    x\n\
             longer-name  1"
        );
    }

    #[test]
    fn an_empty_table_is_its_header() {
        assert_eq!(Table::new(&["A", "B"]).render(), "A  B");
    }

    #[test]
    fn pairs_align_their_values() {
        assert_eq!(
            pairs(&[("visible", "1".into()), ("in-flight", "2".into())]),
            "visible    1\nin-flight  2"
        );
    }

    #[test]
    fn ages_and_sizes_read_at_a_glance() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(59_999), "59s");
        assert_eq!(age(185_000), "3m05s");
        assert_eq!(age(3_720_000), "1h02m");
        assert_eq!(age(90_000_000), "1d01h");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(1536), "1.5KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0MiB");
    }

    #[test]
    fn timestamps_are_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_796_067_307_123), "2026-11-30T19:35:07.123Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn timestamps_at_calendar_edges() {
        // 2100 is not a leap year: the day after 28 February is 1 March.
        assert_eq!(timestamp(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(timestamp(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(timestamp(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(timestamp(253_402_300_800_000), "253402300800000ms");
        assert_eq!(timestamp(u64::MAX), "18446744073709551615ms");
    }

    #[test]
    fn bodies_are_flattened_and_cut() {
        assert_eq!(body_cell(Some("a\nb"), 0, 10), "a b");
        assert_eq!(body_cell(Some("abcdefghij"), 0, 5), "abcd…");
        assert_eq!(body_cell(None, 8, 5), "<6 bytes binary>");
    }
}
