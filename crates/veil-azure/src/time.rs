//! Dates on Azure's wire: RFC 1123 (`Mon, 29 Aug 2011 17:17:21 GMT`) in XML and headers, ISO 8601 UTC
//! (`2024-05-01T12:00:00Z`) in SAS tokens and stored access policies. Converted to and from the engine's
//! milliseconds since the Unix epoch with the `time` crate, whose calendar ends with year 9999 as Azure's does
//! (a message that never expires shows Azure's `Fri, 31 Dec 9999 23:59:59 GMT`).

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{Date, OffsetDateTime, PrimitiveDateTime};
use veil_core::{Millis, NEVER};

/// What Azure shows as the expiration time of a message that never expires.
const NEVER_RFC1123: &str = "Fri, 31 Dec 9999 23:59:59 GMT";
/// Last second the wire format can show (9999-12-31T23:59:59Z). Also the last a date on the wire may name:
/// .NET's `DateTime`, which Azure parses with, ends with 9999, and so does `time` without `large-dates`.
const LAST_SHOWABLE_S: i64 = 253_402_300_799;

const RFC1123: &[BorrowedFormatItem<'_>] = format_description!(
    "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
);
/// The part of RFC 1123 after the weekday, which is not read (a wrong one is not refused). The day and clock
/// fields take one digit or two (`1 Aug 2011 7:05:01`), as Veil has always accepted.
const RFC1123_AFTER_WEEKDAY: &[BorrowedFormatItem<'_>] = format_description!(
    "[day padding:none] [month repr:short] [year] [hour padding:none]:[minute padding:none]:[second padding:none] GMT"
);
const ISO8601_ERROR_TIME: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:7]Z");
const ISO8601_DATE: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month padding:none]-[day padding:none]");
/// The forms SAS tokens carry after the date, most precise last; fractions of a second are dropped.
const ISO8601_DATE_TIMES: [&[BorrowedFormatItem<'_>]; 3] = [
    format_description!(
        "[year]-[month padding:none]-[day padding:none]T[hour padding:none]:[minute padding:none]Z"
    ),
    format_description!(
        "[year]-[month padding:none]-[day padding:none]T[hour padding:none]:[minute padding:none]:[second padding:none]Z"
    ),
    format_description!(
        "[year]-[month padding:none]-[day padding:none]T[hour padding:none]:[minute padding:none]:[second padding:none].[subsecond]Z"
    ),
];

/// The calendar time of an engine time, `None` past 9999-12-31T23:59:59.999Z (where `time`'s calendar ends).
fn date_time(ms: Millis) -> Option<OffsetDateTime> {
    let nanos = i128::from(ms).checked_mul(1_000_000)?;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()
}

/// RFC 1123 of an engine time; [`NEVER`] and anything past year 9999 show as Azure's far future.
pub fn rfc1123(ms: Millis) -> String {
    let mut text = String::with_capacity(NEVER_RFC1123.len());
    write_rfc1123(&mut text, ms);
    text
}

/// [`rfc1123`] appended to `out`, for a writer that puts it straight into a document.
pub fn write_rfc1123(out: &mut String, ms: Millis) {
    let shown = date_time(ms)
        .filter(|_| ms != NEVER)
        .and_then(|at| at.format(RFC1123).ok());
    // `format` fails only on a description naming a component the value lacks; an OffsetDateTime has all.
    out.push_str(shown.as_deref().unwrap_or(NEVER_RFC1123));
}

/// ISO 8601 UTC with seven fractional digits, as the `Time:` line of Azure's error messages. Times past year
/// 9999 show its last second with their own milliseconds, as the wire cannot name a later one.
pub fn iso8601(ms: Millis) -> String {
    let shown_s = (ms / 1_000).min(LAST_SHOWABLE_S as u64);
    let at =
        date_time(shown_s * 1_000 + ms % 1_000).and_then(|at| at.format(ISO8601_ERROR_TIME).ok());
    // Unreachable: the milliseconds are clamped into `time`'s calendar above.
    at.unwrap_or_else(|| String::from("9999-12-31T23:59:59.9990000Z"))
}

/// Engine milliseconds of a UTC calendar time; `None` before the epoch (the engine's clock cannot name it).
fn millis_of(at: PrimitiveDateTime) -> Option<Millis> {
    u64::try_from(at.assume_utc().unix_timestamp())
        .ok()?
        .checked_mul(1_000)
}

/// Parses `Mon, 29 Aug 2011 17:17:21 GMT`. `None` for anything else.
pub fn parse_rfc1123(text: &str) -> Option<Millis> {
    let rest = text.trim().split_once(", ")?.1;
    if rest.contains(['+', '-']) {
        return None; // `time` would read `+2011` as a signed year; the wire never signs one.
    }
    millis_of(PrimitiveDateTime::parse(rest, RFC1123_AFTER_WEEKDAY).ok()?)
}

/// Parses the ISO 8601 UTC forms SAS tokens use: `YYYY-MM-DD`, `YYYY-MM-DDThh:mmZ`, `YYYY-MM-DDThh:mm:ssZ`
/// and `YYYY-MM-DDThh:mm:ss.fffffffZ` (fractions are dropped). `None` for anything else.
pub fn parse_iso8601(text: &str) -> Option<Millis> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None; // `time` would read `+2024` as a signed year; SAS tokens never sign one.
    }
    let at = if text.contains('T') {
        ISO8601_DATE_TIMES
            .iter()
            .find_map(|form| PrimitiveDateTime::parse(text, form).ok())?
            .replace_nanosecond(0)
            .ok()?
    } else {
        Date::parse(text, ISO8601_DATE).ok()?.midnight()
    };
    millis_of(at)
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
    fn edge_dates_format_as_azure_shows_them() {
        // 2000 is a leap year (divisible by 400), 2100 is not (divisible by 100 only).
        let leap_2000 = parse_iso8601("2000-02-29").unwrap();
        assert_eq!(rfc1123(leap_2000), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(parse_iso8601("2100-02-29"), None);
        let after_2100_feb = parse_iso8601("2100-03-01T00:00Z").unwrap();
        assert_eq!(rfc1123(after_2100_feb), "Mon, 01 Mar 2100 00:00:00 GMT");
        assert_eq!(rfc1123(after_2100_feb - 1), "Sun, 28 Feb 2100 23:59:59 GMT");
        // The last millisecond of year 9999 shows as itself, which is also the far future's text; later times
        // show as the far future.
        let last_ms = LAST_SHOWABLE_S as u64 * 1_000 + 999;
        assert_eq!(rfc1123(last_ms), NEVER_RFC1123);
        assert_eq!(rfc1123(last_ms + 1), NEVER_RFC1123);
        assert_eq!(rfc1123(u64::MAX - 1), NEVER_RFC1123);
        assert_eq!(rfc1123(86_399_999), "Thu, 01 Jan 1970 23:59:59 GMT");
    }

    #[test]
    fn error_times_past_year_9999_show_its_last_second() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.0000000Z");
        assert_eq!(iso8601(NEVER), "9999-12-31T23:59:59.6150000Z");
        assert_eq!(
            iso8601(LAST_SHOWABLE_S as u64 * 1_000 + 1_000),
            "9999-12-31T23:59:59.0000000Z"
        );
    }

    #[test]
    fn dates_before_the_epoch_or_with_a_signed_year_are_refused() {
        assert_eq!(parse_iso8601("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_iso8601("1970-01-01"), Some(0));
        assert_eq!(parse_iso8601("+2024-05-01"), None);
        assert_eq!(parse_iso8601("-2024-05-01"), None);
        assert_eq!(parse_rfc1123("Mon, 29 Aug +2011 17:17:21 GMT"), None);
        assert_eq!(parse_rfc1123("Wed, 31 Dec 1969 23:59:59 GMT"), None);
    }

    #[test]
    fn one_digit_fields_parse_as_before() {
        assert_eq!(
            parse_rfc1123("Mon, 1 Aug 2011 7:05:01 GMT"),
            parse_rfc1123("Mon, 01 Aug 2011 07:05:01 GMT")
        );
        assert_eq!(parse_iso8601("2024-5-1"), parse_iso8601("2024-05-01"));
        assert!(parse_iso8601("2024-5-1").is_some());
    }

    #[test]
    fn malformed_rfc1123_dates_are_rejected() {
        assert_eq!(parse_rfc1123("Mon, 29 Aug 2011 17:17:21 UTC"), None);
        assert_eq!(parse_rfc1123("29 Aug 2011"), None);
        assert_eq!(parse_rfc1123("Mon, 31 Jun 2011 17:17:21 GMT"), None);
    }
}
