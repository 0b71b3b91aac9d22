//! Latency statistics: HDR histograms in microseconds, the percentiles every report prints, and the CDF
//! points the charts draw. One clock for every timestamp the harness takes ([`now_us`]).

use std::sync::OnceLock;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram tracks: one hour. Anything longer saturates (and is a broken run anyway).
const HIGHEST_US: u64 = 3_600_000_000;
/// Three significant figures: a recorded 1,234 µs is known to within ±1 µs.
const SIGNIFICANT_FIGURES: u8 = 3;

/// Quantiles sampled for latency CDFs: dense near the tail, where queue latencies differ.
const CDF_QUANTILES: &[f64] = &[
    0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8,
    0.85, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 0.991, 0.992, 0.993, 0.994,
    0.995, 0.996, 0.997, 0.998, 0.999, 0.9999, 1.0,
];

/// Microseconds since a process-wide origin. Monotonic; bodies carry it as their send time, which is valid
/// because producers and consumers run in the same process.
pub fn now_us() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// A latency histogram in microseconds.
#[derive(Clone, Debug)]
pub struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Self {
        // The bounds are constants that `new_with_bounds` accepts (low ≥ 1, high ≥ 2·low, sigfig ≤ 5).
        Self(
            Histogram::new_with_bounds(1, HIGHEST_US, SIGNIFICANT_FIGURES)
                .expect("constant histogram bounds are valid"),
        )
    }

    /// Records one latency; 0 counts as 1 µs (the lowest trackable) and anything past an hour saturates.
    pub fn record_us(&mut self, micros: u64) {
        self.0.saturating_record(micros.max(1));
    }

    pub fn record_since(&mut self, start: Instant) {
        self.record_us(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
    }

    /// Adds another histogram's counts (both have the same bounds, so nothing can fall out of range).
    pub fn merge(&mut self, other: &Latency) {
        // `add` only fails when the other histogram tracks higher values than this one; same bounds here.
        let _ = self.0.add(&other.0);
    }

    pub fn percentiles(&self) -> Percentiles {
        if self.0.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: self.0.len(),
            min: self.0.min(),
            mean: self.0.mean(),
            p50: self.0.value_at_quantile(0.5),
            p90: self.0.value_at_quantile(0.9),
            p99: self.0.value_at_quantile(0.99),
            p999: self.0.value_at_quantile(0.999),
            max: self.0.max(),
        }
    }

    /// `[latency µs, quantile]` points of the cumulative distribution, for charts.
    pub fn cdf(&self) -> Vec<[f64; 2]> {
        if self.0.is_empty() {
            return Vec::new();
        }
        CDF_QUANTILES
            .iter()
            .map(|&q| [self.0.value_at_quantile(q) as f64, q])
            .collect()
    }
}

/// The percentiles a report prints for one histogram, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Percentiles {
    /// One line: `p50 123µs p90 … max …` (milliseconds past 10 ms), or `-` when nothing was recorded.
    pub fn line(&self) -> String {
        if self.count == 0 {
            return "-".into();
        }
        format!(
            "p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (n={})",
            human_us(self.p50 as f64),
            human_us(self.p90 as f64),
            human_us(self.p99 as f64),
            human_us(self.p999 as f64),
            human_us(self.max as f64),
            self.count
        )
    }
}

/// `850µs`, `12.3ms`, `4.20s`.
pub fn human_us(micros: f64) -> String {
    if micros < 1_000.0 {
        format!("{micros:.0}µs")
    } else if micros < 1_000_000.0 {
        format!("{:.2}ms", micros / 1_000.0)
    } else {
        format!("{:.2}s", micros / 1_000_000.0)
    }
}

/// The median of a non-empty sample (mean of the two middle values for an even count).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut latency = Latency::new();
        for micros in 1..=1_000 {
            latency.record_us(micros);
        }
        let p = latency.percentiles();
        assert_eq!(p.count, 1_000);
        assert_eq!(p.min, 1);
        assert_eq!(p.p50, 500);
        assert_eq!(p.p90, 900);
        assert_eq!(p.p99, 990);
        assert_eq!(p.p999, 999);
        assert_eq!(p.max, 1_000);
        assert!((p.mean - 500.5).abs() < 0.01);
    }

    #[test]
    fn empty_histogram_has_zero_percentiles_and_no_cdf() {
        let latency = Latency::new();
        assert_eq!(latency.percentiles(), Percentiles::default());
        assert!(latency.cdf().is_empty());
        assert_eq!(latency.percentiles().line(), "-");
    }

    #[test]
    fn merge_adds_counts_and_zero_records_as_one() {
        let mut a = Latency::new();
        a.record_us(0);
        let mut b = Latency::new();
        b.record_us(10_000);
        a.merge(&b);
        let p = a.percentiles();
        assert_eq!((p.count, p.min), (2, 1));
        assert!(p.max >= 10_000 && p.max < 10_010);
    }

    #[test]
    fn cdf_is_monotonic_and_ends_at_one() {
        let mut latency = Latency::new();
        for micros in [5, 50, 500, 5_000] {
            latency.record_us(micros);
        }
        let cdf = latency.cdf();
        assert!(cdf
            .windows(2)
            .all(|w| w[0][0] <= w[1][0] && w[0][1] < w[1][1]));
        assert_eq!(cdf.last().map(|p| p[1]), Some(1.0));
    }

    #[test]
    fn median_of_odd_and_even_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn human_units() {
        assert_eq!(human_us(850.0), "850µs");
        assert_eq!(human_us(12_345.0), "12.35ms");
        assert_eq!(human_us(4_200_000.0), "4.20s");
    }
}
