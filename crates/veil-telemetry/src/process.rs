//! The standard `process_*` metrics every Prometheus client library exports (CPU time, resident and virtual
//! memory, open and maximum file descriptors, start time), read from `/proc/self` at each scrape, and
//! `veil_build_info{version,commit}`. A collector rather than gauges kept up to date: nothing is read between
//! scrapes. Where `/proc` is missing (not Linux) the process metrics are left out, not reported as zero.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// What `veil_build_info` says: the crate version and the commit the binary was built from.
#[derive(Clone, Copy, Debug)]
pub struct BuildInfo {
    pub version: &'static str,
    pub commit: &'static str,
}

/// Registered once in the server's registry; see the module's docs.
#[derive(Debug)]
pub struct ProcessCollector {
    build: BuildInfo,
}

impl ProcessCollector {
    pub fn new(build: BuildInfo) -> Self {
        Self { build }
    }
}

/// One reading of `/proc/self`.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessReading {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub start_time_seconds: f64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let labels = [
            ("version", self.build.version),
            ("commit", self.build.commit),
        ];
        let mut info = encoder.encode_descriptor(
            "veil_build_info",
            "The version and commit this server was built from (always 1)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1_i64).encode(info.encode_family(&labels)?)?;
        let Some(process) = read_process() else {
            return Ok(());
        };
        ConstCounter::new(process.cpu_seconds).encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            MetricType::Counter,
        )?)?;
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                process.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                process.virtual_bytes as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                process.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                process.open_fds as f64,
            ),
        ];
        for (name, help, value) in gauges {
            ConstGauge::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)?;
        }
        if let Some(max_fds) = process.max_fds {
            ConstGauge::new(max_fds as f64).encode(encoder.encode_descriptor(
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                MetricType::Gauge,
            )?)?;
        }
        Ok(())
    }
}

/// This process's figures, or `None` where `/proc/self/stat` cannot be read.
pub fn read_process() -> Option<ProcessReading> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot_time_s = boot_time_s(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let mut reading = parse_stat(&stat, clock_ticks_per_s(), page_bytes(), boot_time_s)?;
    reading.open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64);
    reading.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| max_open_files(&limits));
    Some(reading)
}

/// CPU time, memory and start time from `/proc/self/stat` (proc(5)): the fields after the command's closing
/// parenthesis, which may itself hold spaces and parentheses.
fn parse_stat(
    stat: &str,
    ticks_per_s: f64,
    page_bytes: u64,
    boot_time_s: u64,
) -> Option<ProcessReading> {
    let after_command = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the command; utime is field 14.
    let fields: Vec<&str> = after_command.split_whitespace().collect();
    let field = |number: usize| -> Option<u64> { fields.get(number - 3)?.parse().ok() };
    let (utime, stime) = (field(14)?, field(15)?);
    Some(ProcessReading {
        cpu_seconds: (utime + stime) as f64 / ticks_per_s,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page_bytes,
        start_time_seconds: boot_time_s as f64 + field(22)? as f64 / ticks_per_s,
        open_fds: 0,
        max_fds: None,
    })
}

/// `btime` of `/proc/stat`: the boot time, seconds since the epoch.
fn boot_time_s(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf reads a constant of the running system; it has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

fn page_bytes() -> u64 {
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_a_command_holding_spaces_and_parentheses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        // cutime cstime priority nice threads itrealvalue starttime vsize rss ...
        let stat = "42 (veil (a) b) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 7 0 1000 123456789 300 \
                    18446744073709551615";
        let reading = parse_stat(stat, 100.0, 4096, 1_700_000_000).expect("parsed");
        assert_eq!(reading.cpu_seconds, 3.0);
        assert_eq!(reading.virtual_bytes, 123_456_789);
        assert_eq!(reading.resident_bytes, 300 * 4096);
        assert_eq!(reading.start_time_seconds, 1_700_000_010.0);
    }

    #[test]
    fn the_soft_open_files_limit_and_the_boot_time_are_found() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             95602                95602                processes \n\
                      Max open files            20000                1048576              files     \n";
        assert_eq!(max_open_files(limits), Some(20_000));
        assert_eq!(
            boot_time_s("cpu  1 2 3\nbtime 1764800000\nprocesses 5\n"),
            Some(1_764_800_000)
        );
    }

    #[test]
    fn this_process_is_read_from_proc() {
        let reading = read_process().expect("/proc/self on Linux");
        assert!(reading.resident_bytes > 0 && reading.virtual_bytes >= reading.resident_bytes);
        assert!(reading.open_fds >= 3, "{reading:?}");
        assert!(reading.start_time_seconds > 1_600_000_000.0, "{reading:?}");
    }
}
