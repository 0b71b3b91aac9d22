//! CPU time of a server process, for the throughput scenario's "CPU per message": user + system time of every
//! thread of the process, from `/proc/PID/stat`, read before and after a run. Unlike a rate, CPU seconds per
//! message moved does not depend on how fast the machine or how busy its other cores are (to first order),
//! so it is the figure that compares across machines.

use std::sync::OnceLock;

/// User + system CPU time the process has used so far, in seconds (all its threads, live and exited).
pub fn cpu_seconds(pid: u32) -> std::io::Result<f64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat"))?;
    let ticks = parse_stat_cpu_ticks(&stat).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no utime and stime fields"),
        )
    })?;
    Ok(ticks as f64 / clock_ticks_per_s())
}

/// `utime + stime` (fields 14 and 15, in clock ticks) of a `/proc/PID/stat` line. Field 2, the command name,
/// is in parentheses and may itself hold spaces and parentheses (`(a) b (c)`), so the fields are counted from
/// after the *last* `)`: there, field 3 (the state) is the first.
fn parse_stat_cpu_ticks(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace().skip(14 - 3);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, the unit of utime and stime); 100 if the call fails,
/// which is what Linux reports on every architecture Veil runs on.
fn clock_ticks_per_s() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the C library and touches no memory of ours.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if ticks > 0 {
            ticks as f64
        } else {
            100.0
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real line of /proc/PID/stat (fields 14 and 15: utime 1234, stime 567).
    const STAT: &[u8] = b"4242 (veil) S 1 4242 4242 0 -1 4194560 2817 0 0 0 1234 567 0 0 20 0 9 0 \
        123456 1048576000 4321 18446744073709551615 1 1 0 0 0 0 0 4096 17663 0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn utime_and_stime_are_summed() {
        assert_eq!(parse_stat_cpu_ticks(STAT), Some(1234 + 567));
    }

    #[test]
    fn comm_with_spaces_and_parentheses_is_skipped() {
        let tricky = b"77 (a) b (c) 9 9) R 1 77 77 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 5 0 0\n";
        assert_eq!(parse_stat_cpu_ticks(tricky), Some(30));
        // Not valid UTF-8 inside the name: only the part after the last ')' is decoded.
        let bytes = b"78 (\xff\xfe)) S 1 78 78 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 5 0 0\n";
        assert_eq!(parse_stat_cpu_ticks(bytes), Some(7));
    }

    #[test]
    fn truncated_or_garbled_lines_give_none() {
        assert_eq!(parse_stat_cpu_ticks(b""), None);
        assert_eq!(parse_stat_cpu_ticks(b"1 (veil"), None);
        assert_eq!(
            parse_stat_cpu_ticks(b"1 (veil) S 1 1 1 0 -1 0 0 0 0 0 12"),
            None
        );
        assert_eq!(
            parse_stat_cpu_ticks(b"1 (veil) S 1 1 1 0 -1 0 0 0 0 0 x 4 0"),
            None
        );
    }

    #[test]
    fn own_cpu_time_is_readable_and_grows() {
        let pid = std::process::id();
        let before = cpu_seconds(pid).unwrap();
        // Spin until the kernel has charged at least one tick (bounded, for a very busy machine).
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after <= before && start.elapsed() < std::time::Duration::from_secs(10) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            after = cpu_seconds(pid).unwrap();
        }
        assert!(after > before, "{before} → {after}");
        assert!(cpu_seconds(u32::MAX).is_err());
    }
}
