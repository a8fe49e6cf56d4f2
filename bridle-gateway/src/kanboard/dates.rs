//! Dates between ISO 8601 (what models write and read) and Kanboard's formats.
//!
//! Kanboard's API accepts dates as text in its configured formats (`Y-m-d`, `Y-m-d H:i`) and
//! rejects unix seconds in a write, but sends dates back as unix seconds, with `0` (or `null`,
//! or an empty string) for "not set". Models are given and asked for ISO 8601 only. A date-time
//! with an offset is converted to UTC before it is written, because the wrapper cannot know the
//! Kanboard server's time zone: run Kanboard in UTC (its default) for times to match.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde_json::Value;

/// A date the wrapper could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{field}`: `{given}` is not an ISO 8601 date (`2026-12-31`) or date-time (`2026-12-31T17:00`, `2026-12-31T17:00:00Z`)"
)]
pub struct DateError {
    /// The argument.
    pub field: &'static str,
    /// What was given (cut to [`MAX_ERROR_TEXT`](super::client::MAX_ERROR_TEXT) bytes: it is
    /// quoted back to the agent).
    pub given: String,
}

/// An ISO 8601 date or date-time as Kanboard accepts it: `Y-m-d` for a date, `Y-m-d H:i` for a
/// date-time (offsets converted to UTC, seconds dropped). An empty string clears the date.
pub fn to_kanboard(field: &'static str, iso: &str) -> Result<String, DateError> {
    let s = iso.trim();
    if s.is_empty() {
        return Ok(String::new());
    }
    let err = || DateError {
        field,
        given: super::client::clipped(iso.to_string()),
    };
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.format("%Y-%m-%d").to_string());
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Ok(dt.with_timezone(&Utc).format("%Y-%m-%d %H:%M").to_string());
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, format) {
            return Ok(dt.format("%Y-%m-%d %H:%M").to_string());
        }
    }
    // A zone without seconds (`2026-12-31T17:00Z`, `...+02:00`).
    for format in ["%Y-%m-%dT%H:%M%#z", "%Y-%m-%dT%H:%MZ"] {
        if let Ok(dt) = DateTime::parse_from_str(s, format) {
            return Ok(dt.with_timezone(&Utc).format("%Y-%m-%d %H:%M").to_string());
        }
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, format) {
            return Ok(dt.format("%Y-%m-%d %H:%M").to_string());
        }
    }
    Err(err())
}

/// A Kanboard date (unix seconds as a number or numeric string) as ISO 8601 UTC
/// (`2026-12-31T17:00:00Z`); `None` when unset (`0`, `null`, empty) or unreadable.
pub fn from_kanboard(v: &Value) -> Option<String> {
    let secs = match v {
        Value::Number(n) => n.as_i64()?,
        Value::String(s) if !s.trim().is_empty() => s.trim().parse().ok()?,
        _ => return None,
    };
    if secs == 0 {
        return None;
    }
    DateTime::<Utc>::from_timestamp(secs, 0).map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn iso_in_kanboard_out() {
        assert_eq!(to_kanboard("due", "2026-12-31").unwrap(), "2026-12-31");
        assert_eq!(
            to_kanboard("due", "2026-12-31T17:00").unwrap(),
            "2026-12-31 17:00"
        );
        assert_eq!(
            to_kanboard("due", "2026-12-31T17:00:59").unwrap(),
            "2026-12-31 17:00"
        );
        assert_eq!(
            to_kanboard("due", "2026-12-31T17:00:00Z").unwrap(),
            "2026-12-31 17:00"
        );
        assert_eq!(
            to_kanboard("due", "2026-12-31T19:00:00+02:00").unwrap(),
            "2026-12-31 17:00"
        );
        assert_eq!(
            to_kanboard("due", "2026-12-31T17:00Z").unwrap(),
            "2026-12-31 17:00"
        );
        assert_eq!(to_kanboard("due", "").unwrap(), "");
        for bad in [
            "1798736400",
            "31/12/2026",
            "2026-13-01",
            "tomorrow",
            "2026-12-31T25:00",
        ] {
            let e = to_kanboard("due", bad).unwrap_err();
            assert_eq!(e.given, bad);
            assert!(e.to_string().contains("`due`"));
        }
    }

    #[test]
    fn unix_seconds_in_iso_out() {
        // 1798736400 is what the recorded Kanboard stored for "2026-12-31 17:00".
        assert_eq!(
            from_kanboard(&json!(1798736400)).as_deref(),
            Some("2026-12-31T17:00:00Z")
        );
        assert_eq!(
            from_kanboard(&json!("1798736400")).as_deref(),
            Some("2026-12-31T17:00:00Z")
        );
        assert_eq!(from_kanboard(&json!(0)), None);
        assert_eq!(from_kanboard(&json!("0")), None);
        assert_eq!(from_kanboard(&json!(null)), None);
        assert_eq!(from_kanboard(&json!("")), None);
    }
}
