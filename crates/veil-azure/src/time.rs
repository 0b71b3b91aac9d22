//! Dates on Azure's wire: RFC 1123 (`Mon, 29 Aug 2011 17:17:21 GMT`) in XML and headers, ISO 8601 UTC
//! (`2024-05-01T12:00:00Z`) in SAS tokens and stored access policies. Converted to and from the engine's
//! milliseconds since the Unix epoch with Howard Hinnant's civil-calendar algorithms, so that no date is out
//! of range (a message that never expires shows Azure's `Fri, 31 Dec 9999 23:59:59 GMT`).

use veil_core::{Millis, NEVER};

const DAY_S: i64 = 86_400;
const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
/// What Azure shows as the expiration time of a message that never expires.
const NEVER_RFC1123: &str = "Fri, 31 Dec 9999 23:59:59 GMT";
/// Last second the wire format can show (9999-12-31T23:59:59Z).
const LAST_SHOWABLE_S: i64 = 253_402_300_799;
/// Last year a date on the wire may name: .NET's `DateTime`, which Azure parses with, ends with 9999, and a
/// larger year would overflow the engine's milliseconds (a 9-digit year is past `u64::MAX` ms).
const LAST_YEAR: i64 = 9_999;

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Civil date of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = (if z >= 0 { z } else { z - 146_096 }) / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// RFC 1123 of an engine time; [`NEVER`] and anything past year 9999 show as Azure's far future.
pub fn rfc1123(ms: Millis) -> String {
    let mut text = String::with_capacity(NEVER_RFC1123.len());
    write_rfc1123(&mut text, ms);
    text
}

/// [`rfc1123`] appended to `out`, for a writer that puts it straight into a document.
pub fn write_rfc1123(out: &mut String, ms: Millis) {
    use std::fmt::Write as _;
    let secs = (ms / 1_000) as i64;
    if ms == NEVER || secs > LAST_SHOWABLE_S {
        out.push_str(NEVER_RFC1123);
        return;
    }
    let days = secs.div_euclid(DAY_S);
    let rem = secs.rem_euclid(DAY_S);
    let (year, month, day) = civil_from_days(days);
    // Writing into a String cannot fail.
    let _ = write!(
        out,
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        day,
        MONTHS[(month - 1) as usize],
        year,
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    );
}

/// ISO 8601 UTC with seven fractional digits, as the `Time:` line of Azure's error messages.
pub fn iso8601(ms: Millis) -> String {
    let secs = (ms / 1_000).min(LAST_SHOWABLE_S as u64) as i64;
    let days = secs.div_euclid(DAY_S);
    let rem = secs.rem_euclid(DAY_S);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}0000Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        ms % 1_000
    )
}

fn number(text: &str) -> Option<u32> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

fn valid_date(year: i64, month: u32, day: u32) -> bool {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days_in_month).contains(&day)
}

fn millis_of(year: i64, month: u32, day: u32, h: u32, m: u32, s: u32) -> Option<Millis> {
    if year > LAST_YEAR || !valid_date(year, month, day) || h > 23 || m > 59 || s > 59 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * DAY_S + i64::from(h * 3_600 + m * 60 + s);
    u64::try_from(secs).ok()?.checked_mul(1_000)
}

/// Parses `Mon, 29 Aug 2011 17:17:21 GMT`. `None` for anything else.
pub fn parse_rfc1123(text: &str) -> Option<Millis> {
    let rest = text.trim().split_once(", ")?.1;
    let mut parts = rest.split(' ');
    let day = number(parts.next()?)?;
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as u32 + 1;
    let year = i64::from(number(parts.next()?)?);
    let mut clock = parts.next()?.split(':');
    let (h, m, s) = (
        number(clock.next()?)?,
        number(clock.next()?)?,
        number(clock.next()?)?,
    );
    if parts.next()? != "GMT" || parts.next().is_some() || clock.next().is_some() {
        return None;
    }
    millis_of(year, month, day, h, m, s)
}

/// Parses the ISO 8601 UTC forms SAS tokens use: `YYYY-MM-DD`, `YYYY-MM-DDThh:mmZ`, `YYYY-MM-DDThh:mm:ssZ`
/// and `YYYY-MM-DDThh:mm:ss.fffffffZ` (fractions are dropped). `None` for anything else.
pub fn parse_iso8601(text: &str) -> Option<Millis> {
    let (date, clock) = match text.split_once('T') {
        Some((date, clock)) => (date, Some(clock.strip_suffix('Z')?)),
        None => (text, None),
    };
    let mut fields = date.split('-');
    let year = i64::from(number(fields.next()?)?);
    let month = number(fields.next()?)?;
    let day = number(fields.next()?)?;
    if fields.next().is_some() {
        return None;
    }
    let (h, m, s) = match clock {
        None => (0, 0, 0),
        Some(clock) => {
            let clock = clock.split_once('.').map_or(clock, |(whole, fraction)| {
                if number(fraction).is_some() {
                    whole
                } else {
                    "invalid"
                }
            });
            let mut parts = clock.split(':');
            let h = number(parts.next()?)?;
            let m = number(parts.next()?)?;
            let s = match parts.next() {
                Some(s) => number(s)?,
                None => 0,
            };
            if parts.next().is_some() {
                return None;
            }
            (h, m, s)
        }
    };
    millis_of(year, month, day, h, m, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1123_matches_the_azure_documentation_example() {
        // Mon, 29 Aug 2011 17:17:21 GMT is 1314638241 s after the epoch.
        assert_eq!(rfc1123(1_314_638_241_000), "Mon, 29 Aug 2011 17:17:21 GMT");
        assert_eq!(
            parse_rfc1123("Mon, 29 Aug 2011 17:17:21 GMT"),
            Some(1_314_638_241_000)
        );
        assert_eq!(rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn error_times_are_iso8601_with_seven_fraction_digits() {
        assert_eq!(iso8601(1_314_638_241_123), "2011-08-29T17:17:21.1230000Z");
    }

    #[test]
    fn a_message_that_never_expires_shows_the_last_second_of_year_9999() {
        assert_eq!(rfc1123(NEVER), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(
            parse_rfc1123(NEVER_RFC1123),
            Some(LAST_SHOWABLE_S as u64 * 1_000)
        );
    }

    #[test]
    fn leap_days_round_trip() {
        let ms = parse_iso8601("2024-02-29T23:59:59Z").unwrap();
        assert_eq!(rfc1123(ms), "Thu, 29 Feb 2024 23:59:59 GMT");
        assert_eq!(parse_iso8601("2023-02-29"), None);
    }

    #[test]
    fn sas_times_parse_in_every_form_the_sdks_write() {
        let midnight = parse_iso8601("2024-05-01").unwrap();
        assert_eq!(parse_iso8601("2024-05-01T00:00Z"), Some(midnight));
        assert_eq!(parse_iso8601("2024-05-01T00:00:00Z"), Some(midnight));
        assert_eq!(
            parse_iso8601("2024-05-01T00:00:00.1234567Z"),
            Some(midnight)
        );
        assert_eq!(
            parse_iso8601("2024-05-01T00:00:00"),
            None,
            "UTC must be explicit"
        );
        assert_eq!(parse_iso8601("2024-13-01"), None);
        assert_eq!(parse_iso8601("tomorrow"), None);
    }

    #[test]
    fn dates_past_year_9999_are_refused_not_overflowed() {
        assert_eq!(
            parse_iso8601("9999-12-31T23:59:59Z"),
            Some(LAST_SHOWABLE_S as u64 * 1_000)
        );
        assert_eq!(parse_iso8601("10000-01-01"), None);
        // Found by the azure_rest fuzz target: a 9-digit year overflowed the milliseconds and panicked.
        assert_eq!(parse_iso8601("999999999-12-01T05:50:41Z"), None);
        assert_eq!(parse_iso8601("4294967295-01-01"), None);
        assert_eq!(parse_rfc1123("Fri, 01 Jan 999999999 00:00:00 GMT"), None);
    }

    #[test]
    fn malformed_rfc1123_dates_are_rejected() {
        assert_eq!(parse_rfc1123("Mon, 29 Aug 2011 17:17:21 UTC"), None);
        assert_eq!(parse_rfc1123("29 Aug 2011"), None);
        assert_eq!(parse_rfc1123("Mon, 31 Jun 2011 17:17:21 GMT"), None);
    }
}
